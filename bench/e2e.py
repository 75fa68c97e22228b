"""End to end on LoCoMo: the agent loop answers each question through real ms programs.

    python bench/e2e.py --dataset locomo --json [--conversations N] [--context-size C]

Each conversation is streamed into a live session as history, one LoCoMo session at a time
with a compress after each, under a small window (default C = 4096 tokens, so most of the
history is evicted into the index). Then every QA item's question is asked in that session by
the agent loop with the deterministic policy model (a rule-based baseline, not an LLM), whose
``ms`` programs run in a sandboxed kernel (a ``KernelManager``; ``--sandbox`` auto, bwrap or
process). The same questions are asked under the same window after

* ``summarise``: summarise-and-discard streamed the same history (``scroll_core.replay``'s
  policy: each evicted span replaced by a fixed-size summary keeping 3 facts); the agent
  then works in a session holding only what survived (kept facts and the live tail), in
  sequence like the Scroll run. This is summarise's best case: its own later Q&A turns do not
  push more of the history out.
* ``none``: no management; a question whose prompt (prefix, whole history, question) is over
  the window is refused, as a provider refuses it, and scores as unanswered.

Per policy, overall and by category: evidence reachable (the share of evidence turns the
policy still holds anywhere: in view, or for Scroll by address in the log), evidence recall
(the share of an item's evidence turns whose text appears in what its cells printed, i.e.
reached the model), answer F1 by LoCoMo's
rules (``locomo_scoring``), abstention accuracy on category 5, median input tokens per
question (the views of its model calls, summed) beside the conversation's size, ms calls per
question, retrievals per evicted span. Default: all 10 conversations (1,986 questions, each
under all three policies): about 65 seconds on 2 cores with the bwrap kernel; ``--conversations``
and ``--questions`` bound it further.
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import re
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from _common import SHARED_DATA, emit
from locomo_scoring import abstained, answer_f1

from scroll_core import EventLog
from scroll_core.agent import Session, TurnResult
from scroll_core.eventlog import Event
from scroll_core.eviction import compress
from scroll_core.ingest import parse
from scroll_core.kernel import KernelConfig, KernelManager
from scroll_core.models import PolicyModel
from scroll_core.profile import Profile
from scroll_core.replay import CallPoint, CompressPoint, Trace, replay
from scroll_core.view import MESSAGE_OVERHEAD_TOKENS

CATEGORIES = {1: "multi_hop", 2: "temporal", 3: "open_domain", 4: "single_hop", 5: "adversarial"}
POLICY_NAMES = ("scroll", "summarise", "none")
DEFAULT_CONVERSATIONS = 10
_DIA_ID = re.compile(r"D\d+:\d+")
_EVIDENCE_CHARS = 60


def _norm(text: str) -> str:
    return " ".join(text.split("⟦")[0].split()).lower()


class Conversation:
    """One LoCoMo sample: its history drafts (by LoCoMo session) and QA items."""

    def __init__(self, sample: dict[str, Any], drafts: list[dict[str, Any]]) -> None:
        self.sample_id = str(sample["sample_id"])
        self.session_id = f"locomo:{self.sample_id}"
        self.drafts = [{**d, "agent_id": f"conv-{self.sample_id}"} for d in drafts]
        self.qa = sample["qa"]

    def chunks(self) -> list[list[dict[str, Any]]]:
        by_session: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for draft in self.drafts:
            by_session[int(draft["metadata"]["locomo_session"])].append(draft)
        return [by_session[k] for k in sorted(by_session)]


def load(path: Path, limit: int) -> list[Conversation]:
    import json

    samples = json.loads(path.read_text())[:limit]
    drafts = parse("locomo", path)
    out = []
    for sample in samples:
        sid = f"locomo:{sample['sample_id']}"
        out.append(Conversation(sample, [d for d in drafts if d["session_id"] == sid]))
    return out


# ---------------------------------------------------------------------- one question
def _item(qa: dict[str, Any]) -> tuple[int, str, str, list[str]]:
    category = int(qa.get("category", 0))
    gold = qa.get("answer", qa.get("adversarial_answer", ""))
    ids: list[str] = []
    for raw in qa.get("evidence") or []:
        ids.extend(_DIA_ID.findall(str(raw)))
    return category, str(qa["question"]), str(gold), list(dict.fromkeys(ids))


def _question_row(
    log: EventLog,
    result: TurnResult | None,
    qa: dict[str, Any],
    evidence_text: dict[str, str],
    refused_tokens: int = 0,
    held: set[str] | None = None,
) -> dict[str, Any]:
    category, _, gold, ids = _item(qa)
    texts = [evidence_text[i] for i in ids if i in evidence_text]
    known = [i for i in ids if i in evidence_text]
    # Evidence the policy still holds anywhere (Scroll: all of it, by address).
    reachable = len([i for i in known if held is None or i in held]) / len(known) if known else None
    answer = result.answer if result is not None and result.ok else None
    printed = ""
    ms_calls = 0
    retrievals: list[tuple[int, ...]] = []
    input_tokens = refused_tokens
    if result is not None:
        outputs = [log.get(t.result_seq).content for t in result.tool_calls if t.result_seq]
        printed = _norm("\n".join(outputs))
        for tool in result.tool_calls:
            ms_calls += len(tool.ms_calls)
            retrievals += [
                tuple(c.seqs) for c in tool.ms_calls if c.name in ("expand", "recall_tool")
            ]
        input_tokens = sum(m.view_tokens for s in result.steps for m in s.model_calls)
    reached = [t for t in texts if t and t[:_EVIDENCE_CHARS] in printed]
    return {
        "category": category,
        "evidence": len(texts),
        "evidence_recall": len(reached) / len(texts) if texts else None,
        "evidence_reachable": reachable,
        "f1": answer_f1(answer, gold, category),
        "abstained": abstained(answer),
        "input_tokens": input_tokens,
        "ms_calls": ms_calls,
        "retrievals": retrievals,
        "answered": result is not None and result.ok,
    }


# ---------------------------------------------------------------------- policies
def run_scroll(
    log: EventLog, conv: Conversation, profile: Profile, kernels: KernelManager, limit: int | None
) -> tuple[list[dict[str, Any]], list[tuple[int, int]]]:
    spans: list[tuple[int, int]] = []
    model = PolicyModel(context_size=profile.context_size)
    with Session(
        log,
        model,
        session_id=conv.session_id,
        agent_id=f"conv-{conv.sample_id}",
        profile=profile,
        kernels=kernels,
    ) as agent:
        for chunk in conv.chunks():
            log.append_many(chunk)
            record = compress(agent.state, profile, log=log, prefix=agent.prefix)
            if record.evicted:
                spans.append(record.evicted)
        text = _evidence_text(log, conv.session_id)
        rows = []
        for qa in conv.qa[:limit]:
            result = agent.ask(str(qa["question"]))
            spans += [
                c.record.evicted for s in result.steps for c in s.compressions if c.record.evicted
            ]
            rows.append(_question_row(log, result, qa, text))
        kernels.release(conv.session_id)
    return rows, spans


def _evidence_text(log: EventLog, session_id: str) -> dict[str, str]:
    return {
        str(e.metadata.get("dia_id")): _norm(e.content)
        for e in log.session_events(session_id, limit=None)
        if e.metadata.get("dia_id")
    }


def surviving(
    events: Sequence[Event], bounds: Sequence[int], profile: Profile, log: EventLog
) -> list[Event]:
    """What summarise-and-discard still holds after streaming ``events`` compressed at
    ``bounds``: the facts its summaries kept and the live tail."""
    timeline: list[CompressPoint | CallPoint] = [CompressPoint(b, "stream") for b in bounds]
    timeline.append(CallPoint(0, events[-1].seq))
    trace = Trace(
        events[0].session_id, tuple(events), timeline, source="stream", counter=log.tokens
    )
    final = replay(trace, profile, "summarise").calls[-1]
    return [e for e in events if e.seq in final.visible]


def run_copy(
    log: EventLog,
    conv: Conversation,
    profile: Profile,
    kernels: KernelManager,
    limit: int | None,
    policy: str,
) -> tuple[list[dict[str, Any]], list[tuple[int, int]]]:
    """Ask the questions in a session that holds only what ``policy`` kept of the history."""
    events = [
        e for e in log.session_events(conv.session_id, limit=None) if e.metadata.get("dia_id")
    ]
    bounds = _chunk_bounds(events)
    kept = surviving(events, bounds, profile, log) if policy == "summarise" else list(events)
    held = {str(e.metadata.get("dia_id")) for e in kept}
    text = _evidence_text(log, conv.session_id)
    rows: list[dict[str, Any]] = []
    spans: list[tuple[int, int]] = []
    if policy == "none":
        # Unmanaged: the first call's prompt is the prefix, all the history and the question.
        model = PolicyModel(context_size=profile.context_size)
        with Session(
            log, model, session_id=f"{conv.session_id}:none-probe", profile=profile
        ) as probe:
            prefix = probe.prefix.tokens
        history = sum(e.tokens + MESSAGE_OVERHEAD_TOKENS for e in kept)
        for qa in conv.qa[:limit]:
            need = prefix + history + log.tokens.count(str(qa["question"]))
            if need > profile.context_size:
                rows.append(_question_row(log, None, qa, text, refused_tokens=need, held=set()))
                continue
            break
        else:
            return rows, spans
        kept = list(events)
    session_id = f"{conv.session_id}:{policy}"
    agent_id = f"{policy}-{conv.sample_id}"
    log.append_many(
        {
            "session_id": session_id,
            "agent_id": agent_id,
            "kind": e.kind,
            "role": e.role,
            "name": e.name,
            "content": e.content,
            "created_at": e.created_at,
            "metadata": e.metadata,
            "dedup_key": f"copy:{e.seq}",
        }
        for e in kept
    )
    model = PolicyModel(context_size=profile.context_size)
    with Session(
        log, model, session_id=session_id, agent_id=agent_id, profile=profile, kernels=kernels
    ) as agent:
        for qa in conv.qa[len(rows) : limit]:
            result = agent.ask(str(qa["question"]))
            spans += [
                c.record.evicted for s in result.steps for c in s.compressions if c.record.evicted
            ]
            rows.append(_question_row(log, result, qa, text, held=held))
        kernels.release(session_id)
    return rows, spans


def _chunk_bounds(events: Sequence[Event]) -> list[int]:
    bounds = []
    for a, b in itertools.pairwise(events):
        if a.metadata.get("locomo_session") != b.metadata.get("locomo_session"):
            bounds.append(a.seq)
    return [*bounds, events[-1].seq]


# ---------------------------------------------------------------------- figures
def summarise_rows(
    rows: list[dict[str, Any]], spans: list[tuple[int, int]], sizes: list[int]
) -> dict[str, Any]:
    def figures(part: list[dict[str, Any]]) -> dict[str, Any]:
        recall = [r["evidence_recall"] for r in part if r["evidence_recall"] is not None]
        adversarial = [r for r in part if r["category"] == 5]
        return {
            "questions": len(part),
            "evidence_recall": _mean(recall),
            "evidence_reachable": _mean(
                [r["evidence_reachable"] for r in part if r["evidence_reachable"] is not None]
            ),
            "answer_f1": _mean([r["f1"] for r in part]),
            "abstention_accuracy": _mean([1.0 if r["abstained"] else 0.0 for r in adversarial]),
            "abstention_rate_answerable": _mean(
                [1.0 if r["abstained"] else 0.0 for r in part if r["category"] != 5]
            ),
            "median_input_tokens": _median([r["input_tokens"] for r in part]),
            "ms_calls_per_question": _mean([r["ms_calls"] for r in part]),
            "answered": _mean([1.0 if r["answered"] else 0.0 for r in part]),
        }

    out = figures(rows)
    out["median_conversation_tokens"] = _median(sizes)
    out["input_over_conversation"] = (
        round(out["median_input_tokens"] / out["median_conversation_tokens"], 4)
        if out["median_input_tokens"] is not None and sizes
        else None
    )
    out.update(_span_figures(rows, spans))
    by: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by[CATEGORIES.get(row["category"], "unknown")].append(row)
    out["by_category"] = {name: figures(part) for name, part in sorted(by.items())}
    return out


def _span_figures(rows: Iterable[dict[str, Any]], spans: list[tuple[int, int]]) -> dict[str, Any]:
    spans = sorted(set(spans))
    if not spans:
        return {"evicted_spans": 0, "retrievals_per_evicted_span": None, "max_span_retrievals": 0}
    los = [lo for lo, _ in spans]
    hits = [0] * len(spans)
    for row in rows:
        for seqs in row["retrievals"]:
            touched = set()
            for seq in seqs:
                i = bisect.bisect_right(los, seq) - 1
                if i >= 0 and spans[i][0] <= seq <= spans[i][1]:
                    touched.add(i)
            for i in touched:
                hits[i] += 1
    return {
        "evicted_spans": len(spans),
        "retrievals_per_evicted_span": round(sum(hits) / len(spans), 4),
        "max_span_retrievals": max(hits),
        "spans_retrieved_3_or_more": sum(1 for h in hits if h >= 3),
    }


def _mean(values: list[float]) -> float | None:
    return round(statistics.fmean(values), 4) if values else None


def _median(values: list[int]) -> float | None:
    return float(statistics.median(values)) if values else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", choices=["locomo"], default="locomo")
    parser.add_argument("--data", type=Path, default=SHARED_DATA / "locomo" / "locomo10.json")
    parser.add_argument("--conversations", type=int, default=DEFAULT_CONVERSATIONS)
    parser.add_argument("--questions", type=int, default=None, help="per conversation")
    parser.add_argument("--context-size", type=int, default=4096)
    parser.add_argument("--sandbox", choices=["auto", "bwrap", "process"], default="auto")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if not args.data.is_file():
        parser.error(f"LoCoMo not found at {args.data}")
    if args.conversations < 1:
        parser.error("--conversations must be at least 1")
    profile = Profile(context_size=args.context_size)
    started = time.perf_counter()
    rows: dict[str, list[dict[str, Any]]] = {p: [] for p in POLICY_NAMES}
    spans: dict[str, list[tuple[int, int]]] = {p: [] for p in POLICY_NAMES}
    sizes: list[int] = []
    with (
        tempfile.TemporaryDirectory(prefix="scroll-e2e-") as tmp,
        EventLog(Path(tmp) / "eventlog.sqlite3") as log,
        KernelManager(KernelConfig(sandbox=args.sandbox), pool_size=1) as kernels,
    ):
        for conv in load(args.data, args.conversations):
            got, hit = run_scroll(log, conv, profile, kernels, args.questions)
            rows["scroll"] += got
            spans["scroll"] += hit
            history = log.session_events(conv.session_id, limit=None)
            sizes.append(sum(e.tokens for e in history if e.metadata.get("dia_id")))
            for policy in ("summarise", "none"):
                got, hit = run_copy(log, conv, profile, kernels, args.questions, policy)
                rows[policy] += got
                spans[policy] += hit
            print(
                f"conversation {conv.sample_id}: {len(got)} questions, "
                f"{time.perf_counter() - started:.0f}s",
                file=sys.stderr,
            )
        tier = kernels.tier
    result: dict[str, Any] = {p: summarise_rows(rows[p], spans[p], sizes) for p in POLICY_NAMES}
    result["setup"] = {
        "dataset": "locomo",
        "conversations": args.conversations,
        "questions": len(rows["scroll"]),
        "context_size": args.context_size,
        "model": "scroll-policy-baseline (rule-based, not an LLM)",
        "kernel_tier": tier,
        "seconds": round(time.perf_counter() - started, 1),
    }
    emit(result, args.json)


if __name__ == "__main__":
    main()
