"""Console fan-out through the real server: daphne on 127.0.0.1 (``asgi_server``), WebSocket
clients logged in with a session cookie, spans through the console span sink. Each span's row
is rendered once whatever the number of sockets and groups, a burst reaches every socket
whole, once and batched, and a live row is the row a reload of the page renders."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections import Counter

import pytest
from django.test import Client
from django.test.signals import template_rendered

from dashboard.groups import session_safe_id
from dashboard.telemetry.spans import BATCH, ConsoleSpanSink
from scroll_core.telemetry import SpanRecord as CoreSpan

pytestmark = pytest.mark.django_db(transaction=True)

SESSIONS = ("fanout:a", "fanout:b")
ROW_TEMPLATE = "dashboard/_span_row.html"
ROW = re.compile(r'<tr id="span-([0-9a-f]{16})".*?</tr>', re.S)


def _core(n: int, session: str) -> CoreSpan:
    now = time.time_ns()
    return CoreSpan(
        trace_id="cd" * 16,
        span_id=f"{n:016x}",
        parent_id=None,
        name="scroll.search",
        start_ns=now - 1_000_000,
        end_ns=now,
        duration_ms=1.0,
        status="ok",
        status_message=None,
        attributes={"scroll.query": f"q<{n}>"},  # escaped on the way
        session_id=session,
    )


class Renders:
    """Counts renders of the span row partial (Django's test-environment signal)."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()

    def __call__(self, sender, template, **kwargs) -> None:
        if template.name == ROW_TEMPLATE:
            with self._lock:
                self.count += 1


class Socket:
    """One live page's WebSocket: every frame, and each span row it held."""

    def __init__(self, path: str, expect: set[str]) -> None:
        self.path = path
        self.expect = expect
        self.frames: list[str] = []
        self.rows: Counter[str] = Counter()
        self.html: dict[str, str] = {}

    async def open(self, base: str, cookie: str):
        from websockets.asyncio.client import connect

        self.ws = await connect(
            base.replace("http://", "ws://") + self.path,
            additional_headers={"Cookie": f"sessionid={cookie}", "Origin": base},
            open_timeout=10,
        )

    async def read_until_complete(self, deadline: float) -> None:
        loop = asyncio.get_running_loop()
        while not self.expect <= set(self.rows) and loop.time() < deadline:
            try:
                frame = await asyncio.wait_for(self.ws.recv(), max(0.05, deadline - loop.time()))
            except TimeoutError:
                break
            if "span-rows" not in frame:
                continue
            self.frames.append(frame)
            for match in ROW.finditer(frame):
                self.rows[match.group(1)] += 1
                self.html[match.group(1)] = match.group(0)
        # Anything after the last expected row would be a duplicate or a stray span.
        try:
            extra = await asyncio.wait_for(self.ws.recv(), 0.3)
        except TimeoutError:
            extra = ""
        for match in ROW.finditer(extra):
            self.rows[match.group(1)] += 1


def _cookie(django_user_model) -> str:
    user = django_user_model.objects.create_superuser("ops", "ops@example.invalid", "pw")
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


def _burst(sink: ConsoleSpanSink, count: int) -> dict[str, set[str]]:
    """``count`` spans, alternating sessions, as fast as this thread ends them."""
    sent: dict[str, set[str]] = {sid: set() for sid in SESSIONS}
    for n in range(1, count + 1):
        session = SESSIONS[n % len(SESSIONS)]
        sink.on_span(_core(n, session))
        sent[session].add(f"{n:016x}")
    return sent


def _fan_out(base: str, cookie: str, sink: ConsoleSpanSink, count: int, per_session: int):
    everything = {f"{n:016x}" for n in range(1, count + 1)}
    of = {
        sid: {f"{n:016x}" for n in range(1, count + 1) if SESSIONS[n % 2] == sid}
        for sid in SESSIONS
    }
    sockets = [
        Socket(f"/ws/sessions/{session_safe_id(sid)}/?session={sid}", of[sid])
        for sid in SESSIONS
        for _ in range(per_session)
    ]
    sockets.append(Socket("/ws/feed/", everything))  # the traces page: every span
    filtered = Socket(f"/ws/feed/?session={SESSIONS[0]}", of[SESSIONS[0]])  # its filter
    sockets.append(filtered)

    async def run():
        await asyncio.gather(*(s.open(base, cookie) for s in sockets))
        try:
            sent = await asyncio.to_thread(_burst, sink, count)
            assert sent == of
            deadline = asyncio.get_running_loop().time() + 30
            await asyncio.gather(*(s.read_until_complete(deadline) for s in sockets))
        finally:
            await asyncio.gather(*(s.ws.close() for s in sockets))

    asyncio.run(run())
    assert sink.flush(10)
    return sockets


def test_a_bursts_rows_are_rendered_once_and_reach_every_socket_once(
    asgi_server, django_user_model
):
    from django.template.loader import render_to_string

    from dashboard.span_frames import span_row
    from dashboard.telemetry.models import SpanRecord

    cookie = _cookie(django_user_model)
    renders = Renders()
    # A burst of more than a batch: several batches, each one frame per socket.
    count, per_session = 2 * BATCH + 50, 3
    sink = ConsoleSpanSink(linger_s=0.05)
    template_rendered.connect(renders)
    try:
        sockets = _fan_out(asgi_server, cookie, sink, count, per_session)
    finally:
        template_rendered.disconnect(renders)
        sink.close()

    stats = sink.stats()
    assert stats["stored"] == count and stats["dropped"] == stats["errors"] == 0
    for socket in sockets:
        missing = socket.expect - set(socket.rows)
        assert not missing, f"{socket.path} never got {len(missing)} of its spans"
        assert set(socket.rows) == socket.expect, f"{socket.path} got another page's spans"
        assert max(socket.rows.values()) == 1, f"{socket.path} got a span twice"
        # Batched: a frame holds many rows, never one frame per span.
        assert len(socket.frames) < len(socket.expect) / 4, (socket.path, len(socket.frames))
        for frame in socket.frames:
            ids = [int(i, 16) for i in ROW.findall(frame)]
            assert ids == sorted(ids, reverse=True)  # newest on top, as the page shows them
            assert frame.count('hx-swap-oob="afterbegin:#span-rows"') == 1
    # Seven sockets in three groups, and each row rendered once.
    assert renders.count == count

    # The row a socket shows is the row a reload renders from the stored span.
    for span_id in (f"{1:016x}", f"{count:016x}"):
        stored = SpanRecord.objects.get(span_id=span_id)
        page_row = render_to_string(ROW_TEMPLATE, {"s": span_row(stored.to_dict())})
        shown = [s.html[span_id] for s in sockets if span_id in s.html]
        assert len(shown) == 1 + per_session + (span_id in sockets[-1].expect)
        assert all(row == ROW.search(page_row).group(0) for row in shown)
        assert "q&lt;" in shown[0]  # the attribute escaped
