"""A long agent session with compaction turned on at the client: what the upstream receives
per turn, and what can still be recalled at the end.

    python bench/gateway_long.py [--json] [--turns 1000] [--limit 8192] [--quick]

One scripted conversation (a user message of about sixty words and a reply of about forty a
turn; the first ``FACTS`` turns each plant a fact, the code of a project, asked for at the
end) is sent three ways, turn by turn, the arms taking turns:

* ``resend``: the client resends everything every turn, never compacting (the baseline);
* ``client``: the client compacts on its own, as a client does without Scroll: once the
  history it would send passes ``--limit`` tokens it keeps its most recent user messages (up
  to a quarter of the limit) and a summary (the first words of its last three turns) and
  discards the rest (summary-and-discard);
* ``scroll``: the same client's compaction is Scroll's: once the usage the upstream reported
  passes ``--limit`` it asks the gateway to compact (``GatewayConversation.compact``, as a
  ``compaction_trigger`` does) and continues from the handle, sending only what follows it;
  the upstream gets Scroll's view (window ``2 * --limit``).

Tokens are the log's counter over what each arm's upstream received (for ``scroll``, the
view). Recall: for each planted fact, whether the code is in what the arm's client holds at
the end (``resend``, ``client``) or found by ``ms.search`` over the session's log, as a
``recall_history_python`` cell would (``scroll``). An in-memory upstream answers at once.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import emit, percentile

from scroll_core.gateway import ClientRequest, GatewayConversation
from scroll_core.gateway._types import ClientMessage, CompactionPoint
from scroll_core.models import ModelReply, Usage
from scroll_core.profile import Profile
from scroll_core.store import EventLog

HEADLINE = "⟦chat | status: answered; next: wait | anchors: bench⟧"
WORDS = (
    "the deploy failed on the staging cluster after the migration ran twice and the cache "
    "kept serving the old schema so we rolled back and opened a ticket for the team"
).split()
FACTS = 10
SYSTEM = "You are a careful coding agent."


def code_of(i: int) -> str:
    return f"K{(i * 7919) % 100000:05d}"


def user_text(turn: int) -> str:
    words = " ".join(WORDS[(turn * 7 + i) % len(WORDS)] for i in range(60))
    if turn < FACTS:
        return f"Turn {turn}: note that the code of project P{turn} is {code_of(turn)}. {words}"
    return f"Turn {turn}: {words}?"


class CountingUpstream:
    """Answers at once with about forty words, reporting as input the tokens it received."""

    def __init__(self, counter) -> None:
        self.counter = counter
        self.calls = 0

    def complete(self, messages, tools, *, model, params):
        self.calls += 1
        received = sum(self.counter.count(str(m.get("content") or "")) for m in messages)
        words = " ".join(WORDS[(self.calls + i) % len(WORDS)] for i in range(40))
        return ModelReply(f"Reply {self.calls}: {words}.\n{HEADLINE}", usage=Usage(received, 1))


def reply_text(turn: int) -> str:
    return "Reply: " + " ".join(WORDS[(turn + i) % len(WORDS)] for i in range(40)) + "."


def run(turns: int, limit: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        log = EventLog(Path(tmp) / "eventlog.sqlite3")
        count = log.tokens.count
        system_tokens = count(SYSTEM)
        sent: dict[str, list[int]] = {"resend": [], "client": [], "scroll": []}
        compactions = {"client": 0, "scroll": 0}

        # resend: everything, every turn.
        resend: list[str] = []
        resend_tokens = system_tokens
        # client: its own summary-and-discard.
        held: list[tuple[str, str]] = []  # (role, text)
        # scroll: the gateway, the client compacting through it.
        conversation = GatewayConversation(
            log, session_id="gw:bench:long", agent_id="bench",
            profile=Profile(context_size=2 * limit),
        )  # fmt: skip
        upstream = CountingUpstream(log.tokens)
        since: list[ClientMessage] = []
        point: CompactionPoint | None = None
        reported = 0
        for turn in range(turns):
            asked = user_text(turn)
            resend.append(asked)
            resend_tokens += count(asked)
            sent["resend"].append(resend_tokens)
            resend.append(reply_text(turn))
            resend_tokens += count(resend[-1])

            held.append(("user", asked))
            if system_tokens + sum(count(t) for _, t in held) > limit:
                held = _summarise(held, limit, count)
                compactions["client"] += 1
            sent["client"].append(system_tokens + sum(count(t) for _, t in held))
            held.append(("assistant", reply_text(turn)))

            if reported > limit:
                request = _request([*since], point, f"c{turn}")
                point, _ = conversation.compact(request)
                since, compactions["scroll"] = [], compactions["scroll"] + 1
            since.append(ClientMessage("user", asked))
            reply = conversation.handle(_request(since, point, f"r{turn}"), upstream, model="b")
            sent["scroll"].append(reply.stats.upstream_tokens)
            reported = reply.usage.input_tokens
            since.append(reply.message())
        resend_text = "\n".join(resend)
        client_text = "\n".join(t for _, t in held)
        recalled = {
            "resend": sum(code_of(i) in resend_text for i in range(FACTS)),
            "client": sum(code_of(i) in client_text for i in range(FACTS)),
            "scroll": sum(_found(conversation, log, i) for i in range(FACTS)),
        }
        blocks = len(conversation.state.index.blocks)
        conversation.close()
        log.close()
    metrics = ["mean_tokens_per_turn", "p95_tokens_per_turn", "max_tokens_per_turn",
               "total_tokens", "over_resend_tokens", "compactions", "facts_recalled"]  # fmt: skip
    out: dict[str, object] = {
        "turns": turns, "limit": limit, "facts": FACTS, "scroll_index_blocks": blocks,
        "readme_tables": [{"title": "Per arm (columns) and figure (rows)", "rows": metrics,
                           "columns": list(sent), "key": "{column}.{row}"}],
    }  # fmt: skip
    for arm, values in sent.items():
        out[f"{arm}.total_tokens"] = sum(values)
        out[f"{arm}.mean_tokens_per_turn"] = round(sum(values) / len(values), 1)
        out[f"{arm}.p95_tokens_per_turn"] = percentile(values, 95)
        out[f"{arm}.max_tokens_per_turn"] = max(values)
        out[f"{arm}.facts_recalled"] = recalled[arm]
        out[f"{arm}.compactions"] = compactions.get(arm, 0)
        out[f"{arm}.over_resend_tokens"] = round(sum(values) / sum(sent["resend"]), 4)
    return out


def _request(messages: list[ClientMessage], point: CompactionPoint | None, rid: str):
    request = ClientRequest(api="responses", model="b", system=SYSTEM, messages=tuple(messages),
                            response_id=f"resp_{rid}")  # fmt: skip
    return replace(request, resumes=point)


def _summarise(held: list[tuple[str, str]], limit: int, count) -> list[tuple[str, str]]:
    """Summary-and-discard: the most recent user messages up to a quarter of the limit, then
    a summary made of the first words of the last three turns."""
    kept: list[tuple[str, str]] = []
    budget = limit // 4
    for role, text in reversed(held):
        if role == "user" and count(text) <= budget:
            kept.insert(0, (role, text))
            budget -= count(text)
    lines = [" ".join(t.split()[:12]) for r, t in held[-6:] if r == "user"]
    return [*kept, ("user", "Summary of the conversation so far: " + " / ".join(lines))]


def _found(conversation: GatewayConversation, log: EventLog, i: int) -> bool:
    _, seqs = conversation.ms.search(f"code of project P{i}", k=5)  # (hits, their seqs)
    return any(code_of(i) in log.get(seq).content for seq in seqs)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--limit", type=int, default=8192)
    parser.add_argument("--quick", action="store_true", help="200 turns")
    args = parser.parse_args(argv)
    emit(run(200 if args.quick else args.turns, args.limit), args.json)


if __name__ == "__main__":
    main()
