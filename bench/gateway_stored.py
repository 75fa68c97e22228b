"""What continuing from a stored response, or adding to a conversation, costs the gateway,
against resending the whole conversation.

    python bench/gateway_stored.py [--json] [--turns 300] [--context 8192]

Three sessions hold the same conversation, one request per turn, in the gateway's core
(``GatewayConversation``, a SQLite Event Log in a temporary folder, an in-memory upstream
that answers at once, so only the gateway's own work is timed):

* ``stateless``: the client resends the whole conversation every time (Chat Completions,
  or the Responses API with ``store: false``), the baseline;
* ``stored``: the client sends only the new message, naming the last response
  (``previous_response_id``); the gateway reads the conversation up to it back from the
  log (``ClientRequest.continues``);
* ``conversation``: the client sends only the new message, naming its conversation (the
  Conversations API); the gateway continues from the session's chain as it stands
  (``ClientRequest.conversation_id``).

The arms take turns, request by request, so both see the machine at the same moment. With the
window at ``--context`` tokens the history is evicted as it grows, so the stored arm reads
evicted messages back from the log: the cost this bench is for. Figures: p50 and p95 of the
time ``handle`` takes per arm, over the last half of the turns (the longer histories), and
their ratios to the baseline. The server's lookup of the stored record or of the
conversation (one indexed row) is not included.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import emit, percentile

from scroll_core.gateway import ClientRequest, GatewayConversation, StoredPlace
from scroll_core.gateway._types import ClientMessage
from scroll_core.models import ModelReply, Usage
from scroll_core.profile import Profile
from scroll_core.store import EventLog

HEADLINE = "⟦chat | status: answered; next: wait | anchors: bench⟧"
WORDS = (
    "the deploy failed on the staging cluster after the migration ran twice and the cache "
    "kept serving the old schema so we rolled back and opened a ticket for the team"
).split()


class InstantUpstream:
    """Answers every request at once with a reply of about forty words."""

    def __init__(self) -> None:
        self.calls = 0

    def complete(self, messages, tools, *, model, params):
        self.calls += 1
        words = [WORDS[(self.calls + i) % len(WORDS)] for i in range(40)]
        return ModelReply(f"Reply {self.calls}: {' '.join(words)}.\n{HEADLINE}", usage=Usage(1, 1))


def user_text(turn: int) -> str:
    words = [WORDS[(turn * 7 + i) % len(WORDS)] for i in range(60)]
    return f"Turn {turn}: {' '.join(words)}?"


def request(messages: list[ClientMessage]) -> ClientRequest:
    return ClientRequest(api="responses", model="bench", system="You are terse.",
                         messages=tuple(messages), store=True)  # fmt: skip


def run(turns: int, context: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        log = EventLog(Path(tmp) / "eventlog.sqlite3")
        profile = Profile(context_size=context)
        arms = {
            name: GatewayConversation(
                log, session_id=f"gw:bench:{name}", agent_id="bench", profile=profile
            )
            for name in ("stateless", "stored", "conversation")
        }
        upstream = InstantUpstream()
        history: list[ClientMessage] = []
        place: StoredPlace | None = None
        times: dict[str, list[float]] = {name: [] for name in arms}
        for turn in range(turns):
            asked = ClientMessage("user", user_text(turn))
            # Stateless: the whole conversation; stored: the new message, naming the last reply.
            began = time.perf_counter()
            reply = arms["stateless"].handle(
                replace(request([*history, asked]), response_id=f"resp_a{turn}"),
                upstream, model="bench",
            )  # fmt: skip
            times["stateless"].append(time.perf_counter() - began)
            stored_request = replace(request([asked]), response_id=f"resp_b{turn}",
                                     continues=place)  # fmt: skip
            began = time.perf_counter()
            again = arms["stored"].handle(stored_request, upstream, model="bench")
            times["stored"].append(time.perf_counter() - began)
            added = replace(request([asked]), response_id=f"resp_c{turn}",
                            conversation_id="conv_bench")  # fmt: skip
            began = time.perf_counter()
            said = arms["conversation"].handle(added, upstream, model="bench")
            times["conversation"].append(time.perf_counter() - began)
            assert said.stats.appended == 1 and not said.stats.rewritten, said.stats
            history += [asked, reply.message()]
            position = 2 * turn + 1
            place = StoredPlace(f"resp_b{turn}", position, again.message().fingerprint(),
                                again.logged_as)  # fmt: skip
            assert again.stats.appended == 1 and not again.stats.rewritten, again.stats
        evicted = sum(1 for _ in arms["stored"].state.index.blocks)
        for conversation in arms.values():
            conversation.close()
        log.close()
    late = turns // 2
    out: dict[str, float] = {"turns": turns, "context_size": context, "index_blocks": evicted}
    for name, values in times.items():
        tail = [v * 1000 for v in values[late:]]
        out[f"{name}_p50_ms"] = round(percentile(tail, 50), 3)
        out[f"{name}_p95_ms"] = round(percentile(tail, 95), 3)
    for name in ("stored", "conversation"):
        ratio = out[f"{name}_p50_ms"] / out["stateless_p50_ms"]
        out[f"{name}_over_stateless_p50"] = round(ratio, 3)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--context", type=int, default=8192)
    args = parser.parse_args(argv)
    emit(run(args.turns, args.context), args.json)


if __name__ == "__main__":
    main()
