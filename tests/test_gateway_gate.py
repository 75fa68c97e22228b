"""The gateway's cap on requests running Python at once (dashboard.gateway.service.Gate): a
request gives its slot up while it waits, so two requests of one session never deadlock."""

from __future__ import annotations

import threading
from contextlib import contextmanager

import pytest

from dashboard.gateway.service import Gate
from scroll_core.gateway import GatewayConversation, parse_chat_request
from scroll_core.models import ModelReply, Usage
from scroll_core.profile import Profile
from scroll_core.store import EventLog
from scroll_core.tokens import CharRatioCounter

HEADLINE = "⟦chat | status: answered; next: wait | anchors: test⟧"


class ParkedUpstream:
    """Answers at once, except the first call: it says it arrived and waits for ``go``."""

    def __init__(self):
        self.arrived = threading.Event()
        self.go = threading.Event()
        self.calls = 0

    def complete(self, messages, tools, *, model, params):
        self.calls += 1
        if self.calls == 1:
            self.arrived.set()
            assert self.go.wait(30)
        return ModelReply(f"ok {self.calls}\n{HEADLINE}", usage=Usage(10, 1))


def test_a_request_waiting_for_its_session_gives_its_slot_up(tmp_path):
    gate = Gate(1)
    parked = threading.Event()  # B released its slot to wait for the session

    def idle_for(name):
        @contextmanager
        def idle():
            with gate.released():
                if name == "B":
                    parked.set()
                yield

        return idle

    upstream = ParkedUpstream()
    replies: dict[str, str] = {}
    with EventLog(tmp_path / "log.sqlite3", token_counter=CharRatioCounter()) as log:
        conv = GatewayConversation(
            log, session_id="gw:a:s", agent_id="a", profile=Profile(context_size=8192)
        )

        def serve(name, text):
            body = {"model": "m", "messages": [{"role": "user", "content": text}]}
            with gate:
                reply = conv.handle(
                    parse_chat_request(body), upstream, model="m", idle=idle_for(name)
                )
            replies[name] = reply.content

        a = threading.Thread(target=serve, args=("A", "first"))
        a.start()
        assert upstream.arrived.wait(30)  # A is at its upstream, its slot given up
        b = threading.Thread(target=serve, args=("B", "second"))
        b.start()
        assert parked.wait(30)  # B took the free slot, then gave it up at A's session lock
        upstream.go.set()
        a.join(30)
        b.join(30)
        assert not a.is_alive() and not b.is_alive()
    assert replies == {"A": "ok 1", "B": "ok 2"}


def test_a_gate_needs_a_slot():
    with pytest.raises(ValueError):
        Gate(0)
