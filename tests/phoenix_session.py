"""A gateway session whose spans go wherever the OTLP variables of its environment say.

    python -m tests.phoenix_session   -> prints one JSON line: the session id, how many spans
                                          it made and what the upstream received per call

tests/test_phoenix.py runs it in a process of its own, as an operator would start Scroll:
the OpenTelemetry resource (service and project names) is fixed once per process, so a test
process that configured telemetry before cannot show it. Two turns through the gateway's
core with a scripted upstream: a plain answer, then a recall cell in a real kernel and the
answer it found.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from scroll_core import telemetry
from scroll_core.gateway import GatewayConversation, parse_chat_request
from scroll_core.kernel import Kernel, KernelConfig
from scroll_core.models import ModelReply, ToolCall, Usage
from scroll_core.profile import Profile
from scroll_core.prompts import RECALL_TOOL
from scroll_core.store import EventLog
from scroll_core.tokens import CharRatioCounter

SESSION = "gw:phoenix:s"
MODEL = "up-model"
HEADLINE = "⟦phoenix | status: answered; next: wait | anchors: test⟧"
SYSTEM = "You are terse."
RECALL = "print(ms.search('PELICAN', k=3))"


class ScriptedUpstream:
    """Replies in order and keeps what every call received."""

    def __init__(self, *replies: ModelReply) -> None:
        self.replies = list(replies)
        self.received: list[list[dict[str, Any]]] = []

    def complete(self, messages: Any, tools: Any, *, model: str, params: Any) -> ModelReply:
        self.received.append(json.loads(json.dumps(messages)))
        return self.replies.pop(0)


def request(*messages: dict[str, Any]) -> Any:
    return parse_chat_request(
        {"model": "client-model", "messages": [{"role": "system", "content": SYSTEM}, *messages]}
    )


def main() -> int:
    state = telemetry.configure(ring_size=10_000)
    upstream = ScriptedUpstream(
        ModelReply(f"Noted.\n{HEADLINE}", usage=Usage(120, 8), model="up-model-0001"),
        ModelReply(
            "",
            (ToolCall("call_recall_1", RECALL_TOOL, {"code": RECALL}),),
            Usage(150, 20),
            "tool_calls",
            "up-model-0001",
        ),
        ModelReply(f"It was PELICAN.\n{HEADLINE}", usage=Usage(210, 9), model="up-model-0001"),
    )
    first = {"role": "user", "content": "remember the code word PELICAN"}
    with (
        tempfile.TemporaryDirectory(prefix="scroll-phoenix-") as folder,
        EventLog(Path(folder) / "eventlog.sqlite3", token_counter=CharRatioCounter()) as log,
        Kernel(KernelConfig(sandbox="process")) as kernel,
    ):
        conversation = GatewayConversation(
            log,
            session_id=SESSION,
            agent_id="phoenix",
            profile=Profile(context_size=8192),
            kernel=kernel,
        )
        noted = conversation.handle(request(first), upstream, model=MODEL)
        answer = conversation.handle(
            request(
                first,
                {"role": "assistant", "content": noted.content},
                {"role": "user", "content": "what was the word?"},
            ),
            upstream,
            model=MODEL,
        )
    assert answer.content == "It was PELICAN.", answer.content
    assert telemetry.force_flush()
    assert state.ring is not None
    spans = len(state.ring)
    telemetry.reset()  # the last metrics export happens here
    print(json.dumps({"session": SESSION, "spans": spans, "received": upstream.received}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
