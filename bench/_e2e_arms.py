"""The five arms of the end-to-end bench, each answering one conversation's questions.

Every arm uses the same model (the rule-based ``PolicyModel``, told to abstain in LoCoMo's
wording), the same window C and the same questions. What differs is what the model sees:

``none``       the whole history in one prompt, built here with no Scroll code in its path (no
               Event Log, no compress, no ``ms``, no tools). A prompt whose tokens plus the
               output reserve are over C is refused, as a provider refuses it, and counts as
               a failure.
``truncate``   a sliding window: the newest turns that fit beside the prefix and question.
``summarise``  the extractive summarise baseline (``_extractive``): the turns that do not fit
               are replaced by extracted sentences within a budget B, the newest turns fill
               the rest. B per question is what Scroll's view spent in the same run on the
               same question on evicted history: its index section plus its recall cells'
               output. No Scroll compress runs in its path.
``scroll``     Scroll's agent loop: history streamed into a live session with a compress after
               each LoCoMo session, then every question asked in that session in order.
``scroll-flat`` the same with the replay lab's flat policy: an index that never carries into
               tiers (``replay.FLAT_TIER_CAP``).

The three baselines render each turn as ``[YYYY-MM-DD HH:MM] Speaker: text`` (the date and
speaker a plain transcript keeps) and ask every question against the history alone, their
best case; Scroll's arms ask in sequence in one session, so earlier answers share its window.

Per question every arm measures, from the messages its model was actually given: which
evidence turns were in its first call's view, which reached the model by the answering
call (view or printed cell output), and, for Scroll's arms, which were addressable (in the
session's log, covered by the live view or an index block, and returned by ``ms.expand``).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench._extractive import ExtractiveSummariser
from scroll_core import EventLog
from scroll_core.agent import Session
from scroll_core.eviction import compress
from scroll_core.kernel import KernelManager
from scroll_core.models import PolicyModel
from scroll_core.models.base import ModelReply, message_text
from scroll_core.profile import Profile
from scroll_core.replay import FLAT_TIER_CAP
from scroll_core.tokens import TokenCounter

__all__ = [
    "ARMS",
    "BASELINE_SYSTEM",
    "MESSAGE_OVERHEAD",
    "SCROLL_ARMS",
    "Conversation",
    "HistoryTurn",
    "Item",
    "Outcome",
    "Recording",
    "evidence_keys",
    "present",
    "run_baseline",
    "run_scroll_arm",
    "transcript_line",
]

ARMS = ("none", "truncate", "summarise", "scroll", "scroll-flat")
SCROLL_ARMS = ("scroll", "scroll-flat")
# Per-message tokens for role and separators; the same constant Scroll's view counts.
MESSAGE_OVERHEAD = 4
BASELINE_SYSTEM = (
    "You answer questions about the conversation in the messages below. Each line starts "
    "with when it was said and who said it. Answer in a few words. If the conversation does "
    'not say, answer exactly: "{abstention}"'
)
_EVIDENCE_CHARS = 60
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_DIA_ID = re.compile(r"D\d+:\d+")


# ---------------------------------------------------------------------- data
@dataclass(frozen=True)
class HistoryTurn:
    """One dialog turn of the history."""

    dia_id: str
    speaker: str
    text: str
    created_at: str
    block: int  # the LoCoMo session it belongs to: the chunk it is streamed in
    draft: dict[str, Any] = field(repr=False, compare=False)


@dataclass(frozen=True)
class Item:
    """One QA item."""

    category: int
    question: str
    gold: str
    evidence: tuple[str, ...]

    @classmethod
    def from_qa(cls, qa: dict[str, Any]) -> Item:
        ids: list[str] = []
        for raw in qa.get("evidence") or []:
            ids.extend(_DIA_ID.findall(str(raw)))
        gold = qa.get("answer", qa.get("adversarial_answer", ""))
        return cls(int(qa.get("category", 0)), str(qa["question"]), str(gold), tuple(ids))


@dataclass
class Conversation:
    """One LoCoMo sample: its turns in order and its QA items."""

    sample_id: str
    turns: list[HistoryTurn]
    items: list[Item]

    @classmethod
    def from_sample(cls, sample: dict[str, Any], drafts: Iterable[dict[str, Any]]) -> Conversation:
        turns = [
            HistoryTurn(
                dia_id=str(d["metadata"]["dia_id"]),
                speaker=str(d["name"]),
                text=str(d["content"]),
                created_at=str(d["created_at"]),
                block=int(d["metadata"]["locomo_session"]),
                draft=d,
            )
            for d in drafts
        ]
        items = [Item.from_qa(qa) for qa in sample["qa"]]
        return cls(str(sample["sample_id"]), turns, items)

    def blocks(self) -> list[list[HistoryTurn]]:
        by: dict[int, list[HistoryTurn]] = defaultdict(list)
        for turn in self.turns:
            by[turn.block].append(turn)
        return [by[k] for k in sorted(by)]


@dataclass
class Outcome:
    """What one arm did for one question."""

    answer: str | None
    refused: bool = False
    tokens_billed: int = 0  # input tokens of every model call made (refused calls bill 0)
    prompt_tokens: int = 0  # the first call's prompt, refused or not
    in_view: set[str] = field(default_factory=set)  # evidence dia_ids in the first call's view
    reached: set[str] = field(default_factory=set)  # ... in any call's messages (view, output)
    addressable: set[str] = field(default_factory=set)  # ... in the log and reachable by ms
    ms_calls: int = 0
    evictions: int = 0
    retrievals: list[tuple[int, ...]] = field(default_factory=list)
    summary_budget: int | None = None  # summarise: B
    summary_tokens: int | None = None  # summarise: what its summary message cost
    evidence_budget: int = 0  # scroll: index section + recall output tokens (B for summarise)
    final_messages: list[dict[str, Any]] | None = None  # the answering call, kept for --tune
    final_tools: list[dict[str, Any]] | None = None


class Recording:
    """A ``ChatModel`` that hands every call to ``model`` and keeps the messages it was given
    (what the model saw is measured, not assumed)."""

    baseline = True

    def __init__(self, model: PolicyModel) -> None:
        self.model = model
        self.name = model.name
        self.context_size = model.context_size
        self.calls: list[tuple[list[dict[str, Any]], list[dict[str, Any]]]] = []

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelReply:
        self.calls.append(([dict(m) for m in messages], [dict(t) for t in tools]))
        return self.model.complete(messages, tools)


# ---------------------------------------------------------------------- presence
def _norm(text: str) -> str:
    return " ".join(text.split("⟦")[0].split()).lower()


def evidence_keys(text: str) -> tuple[str, ...]:
    """What shows a turn is present: the opening characters of each of its sentences of three
    words or more (the whole turn's when it has none). Any one found counts."""
    sentences = [s for s in _SENTENCE.split(" ".join(text.split())) if len(s.split()) >= 3]
    return tuple(_norm(s)[:_EVIDENCE_CHARS] for s in (sentences or [text]) if s.strip())


def present(
    wanted: Iterable[str], keys: dict[str, tuple[str, ...]], messages: Sequence[dict[str, Any]]
) -> set[str]:
    """The dia_ids among ``wanted`` whose turn shows in ``messages`` (see ``evidence_keys``)."""
    haystack = " ".join("\n".join(message_text(m) for m in messages).split()).lower()
    return {d for d in wanted if d in keys and any(k and k in haystack for k in keys[d])}


# ---------------------------------------------------------------------- baselines
def transcript_line(turn: HistoryTurn) -> str:
    stamp = turn.created_at[:16].replace("T", " ")
    return f"[{stamp}] {turn.speaker}: {' '.join(turn.text.split())}"


def _answer_of(reply: ModelReply) -> str:
    # The policy ends its reply with a headline line; the answer is what precedes it.
    return reply.content.rsplit("\n⟦", 1)[0].strip()


def run_baseline(
    arm: str,
    conv: Conversation,
    items: Sequence[Item],
    profile: Profile,
    counter: TokenCounter,
    model: PolicyModel,
    budgets: Sequence[int] | None = None,
    *,
    keep_messages: bool = False,
) -> list[Outcome]:
    """``none``, ``truncate`` or ``summarise`` over ``conv``'s history; ``budgets`` gives B
    per item for ``summarise``."""
    if arm not in ("none", "truncate", "summarise"):
        raise ValueError(f"not a baseline arm: {arm!r}")
    if arm == "summarise" and (budgets is None or len(budgets) != len(items)):
        raise ValueError("summarise needs one budget per item")
    system = {"role": "system", "content": BASELINE_SYSTEM.format(abstention=model.abstention)}
    prefix = counter.count(system["content"]) + MESSAGE_OVERHEAD
    lines = [transcript_line(t) for t in conv.turns]
    costs = [counter.count(line) + MESSAGE_OVERHEAD for line in lines]
    keys = {t.dia_id: evidence_keys(t.text) for t in conv.turns}
    summariser = ExtractiveSummariser(conv.turns, counter) if arm == "summarise" else None
    limit = profile.hard_limit  # prompt plus the output reserve must fit C
    out: list[Outcome] = []
    for i, item in enumerate(items):
        ask = {"role": "user", "content": item.question}
        fixed = prefix + counter.count(item.question) + MESSAGE_OVERHEAD
        summary: list[dict[str, Any]] = []
        budget = summary_cost = None
        if arm == "none":
            first = 0
        else:
            room = limit - fixed
            if summariser is not None and budgets is not None:
                budget = max(0, budgets[i])
                room -= budget
            first = _newest_fitting(costs, room)
            if summariser is not None and budget is not None and first > 0:
                text = summariser.summary(first, budget)
                if text:
                    summary_cost = counter.count(text) + MESSAGE_OVERHEAD
                    summary = [{"role": "user", "content": text}]
        history = [{"role": "user", "content": line} for line in lines[first:]]
        messages = [system, *summary, *history, ask]
        tokens = fixed + sum(costs[first:]) + (summary_cost or 0)
        seen = present(item.evidence, keys, messages)
        if tokens > limit:
            out.append(Outcome(None, refused=True, prompt_tokens=tokens, summary_budget=budget))
            continue
        reply = model.complete(messages, [])
        out.append(
            Outcome(
                _answer_of(reply),
                tokens_billed=tokens,
                prompt_tokens=tokens,
                in_view=seen,
                reached=set(seen),
                summary_budget=budget,
                summary_tokens=summary_cost,
                final_messages=messages if keep_messages else None,
                final_tools=[] if keep_messages else None,
            )
        )
    return out


def _newest_fitting(costs: Sequence[int], room: int) -> int:
    """The index of the oldest turn kept when the newest turns fill ``room`` tokens."""
    used, first = 0, len(costs)
    while first > 0 and used + costs[first - 1] <= room:
        first -= 1
        used += costs[first]
    return first


# ---------------------------------------------------------------------- Scroll's arms
def run_scroll_arm(
    arm: str,
    log: EventLog,
    conv: Conversation,
    items: Sequence[Item],
    profile: Profile,
    kernels: KernelManager,
    model: PolicyModel,
    *,
    keep_messages: bool = False,
) -> tuple[list[Outcome], list[tuple[int, int]]]:
    """Stream ``conv`` into a live session under ``arm``'s profile, then ask every item in
    it; returns the outcomes and every evicted span."""
    if arm not in SCROLL_ARMS:
        raise ValueError(f"not a Scroll arm: {arm!r}")
    used = profile if arm == "scroll" else profile.replace(tier_cap=FLAT_TIER_CAP)
    session_id = f"locomo:{conv.sample_id}:{arm}"
    agent_id = f"{arm}-{conv.sample_id}"
    recording = Recording(model)
    spans: list[tuple[int, int]] = []
    keys = {t.dia_id: evidence_keys(t.text) for t in conv.turns}
    out: list[Outcome] = []
    with Session(
        log, recording, session_id=session_id, agent_id=agent_id, profile=used, kernels=kernels
    ) as agent:
        seq_of: dict[str, int] = {}
        for block in conv.blocks():
            seqs = log.append_many(
                {
                    **t.draft,
                    "session_id": session_id,
                    "agent_id": agent_id,
                    "dedup_key": f"{arm}:{t.draft.get('dedup_key') or t.dia_id}",
                }
                for t in block
            )
            seq_of.update(zip((t.dia_id for t in block), seqs, strict=True))
            record = compress(agent.state, used, log=log, prefix=agent.prefix)
            if record.evicted:
                spans.append(record.evicted)
        for item in items:
            addressable = {
                d for d in item.evidence if d in seq_of and _addressable(agent, seq_of[d])
            }
            recording.calls.clear()
            result = agent.ask(item.question)
            evicted = [
                c.record.evicted for s in result.steps for c in s.compressions if c.record.evicted
            ]
            spans += evicted
            calls = recording.calls
            first = calls[0][0] if calls else []
            final = calls[-1][0] if calls else []
            ms_calls = sum(len(t.ms_calls) for t in result.tool_calls)
            retrievals = [
                tuple(c.seqs)
                for t in result.tool_calls
                for c in t.ms_calls
                if c.name in ("expand", "recall_tool")
            ]
            views = [m.view for s in result.steps for m in s.model_calls]
            index_tokens = int(views[0].get("index", 0)) if views else 0
            printed = _live_tool_output(final)
            out.append(
                Outcome(
                    result.answer if result.ok else None,
                    tokens_billed=sum(m.view_tokens for s in result.steps for m in s.model_calls),
                    prompt_tokens=int(views[0].get("total", 0)) if views else 0,
                    in_view=present(item.evidence, keys, first),
                    reached=set().union(*(present(item.evidence, keys, m) for m, _ in calls)),
                    addressable=addressable,
                    ms_calls=ms_calls,
                    evictions=len(evicted),
                    retrievals=retrievals,
                    evidence_budget=index_tokens + sum(log.tokens.count(p) for p in printed),
                    final_messages=final if keep_messages else None,
                    final_tools=calls[-1][1] if keep_messages and calls else None,
                )
            )
        kernels.release(session_id)
    return out, spans


def _addressable(agent: Session, seq: int) -> bool:
    """The turn at ``seq`` is in the session's log, the live view or an index block covers
    it, and ``ms.expand`` returns it."""
    state = agent.state
    if seq not in state.live and state.index.block_for(seq) is None:
        return False
    try:
        _, seqs = agent.ms.expand(seq)
    except LookupError:
        return False
    return list(seqs) == [seq] and agent.log.get(seq).session_id == agent.session_id


def _live_tool_output(messages: Sequence[dict[str, Any]]) -> list[str]:
    """The tool results after the last user message: what the recall cells printed."""
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    return [message_text(m) for m in messages[last_user + 1 :] if m.get("role") == "tool"]
