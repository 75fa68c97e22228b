"""The live pages' consumers: refused when anonymous, fragments for htmx when logged in."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from asgiref.sync import sync_to_async
from channels.layers import channel_layers, get_channel_layer
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import AnonymousUser

from dashboard.console.routing import websocket_urlpatterns
from dashboard.groups import ALERTS, SPANS, session_group, session_safe_id

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _a_channel_layer_per_test():
    """Each test runs in an event loop of its own, and a channel layer is not meant to
    outlive its loop: Redis's layer keeps one receive lock for all its readers, and a reader
    an earlier test's loop left waiting leaves it held, bound to that loop, so the next
    test's consumer fails on disconnect ("bound to a different event loop"). Every test here
    gets the configured layer new; the in-memory one loses nothing it needs."""
    channel_layers.backends.clear()
    yield
    channel_layers.backends.clear()


def _span(name="scroll.evict", session_id="locomo:conv-26", span_id="a" * 16, **extra):
    span = {
        "trace_id": "b" * 32,
        "span_id": span_id,
        "parent_id": None,
        "name": name,
        "start_ns": 1_700_000_000_000_000_000,
        "end_ns": 1_700_000_000_020_000_000,
        "duration_ms": 20.0,
        "status": "ok",
        "status_message": None,
        "attributes": {"scroll.seq_lo": 4, "scroll.seq_hi": 40, "scroll.tier": 0},
        "session_id": session_id,
        "kind": "internal",
        "events": [],
    }
    span.update(extra)
    return span


@pytest.fixture
async def user():
    from django.contrib.auth import get_user_model

    return await sync_to_async(get_user_model().objects.create_user)("viewer", password="pw")


async def _span_frames(communicator, count, timeout=2.0):
    """The next ``count`` frames that carry span rows, passing over a session page's part
    refreshes (its header, index, kernel and charts), which arrive on their own schedule."""
    frames = []
    while len(frames) < count:
        frame = await communicator.receive_from(timeout=timeout)
        if 'id="span-' in frame:
            frames.append(frame)
    return frames


async def _no_span_frame(communicator, timeout=0.5):
    """True when no frame carrying a span row arrives within ``timeout`` (part refreshes
    pass). ``receive_nothing`` waits without ending the consumer, as a timed-out
    ``receive_from`` would."""
    while not await communicator.receive_nothing(timeout=timeout):
        if 'id="span-' in await communicator.receive_from():
            return False
    return True


async def _connect(path, user):
    communicator = WebsocketCommunicator(URLRouter(websocket_urlpatterns), path)
    communicator.scope["user"] = user
    connected, _ = await communicator.connect()
    return communicator, connected


@pytest.mark.parametrize("path", ["/ws/alerts/", "/ws/feed/", f"/ws/sessions/{'0' * 16}/"])
async def test_it_refuses_anonymous_sockets(path):
    communicator, connected = await _connect(path, AnonymousUser())
    try:
        assert not connected
    finally:
        await communicator.disconnect()


async def test_it_refuses_anonymous_sockets_through_the_real_stack():
    from dashboard.asgi import application

    communicator = WebsocketCommunicator(
        application,
        "/ws/feed/",
        headers=[(b"origin", b"http://localhost"), (b"host", b"localhost")],
    )
    try:
        connected, _ = await communicator.connect()
        assert not connected
    finally:
        await communicator.disconnect()


async def test_session_socket_refuses_a_malformed_group_id(user):
    communicator, connected = await _connect("/ws/sessions/not-a-hash/", user)
    try:
        assert not connected
    finally:
        await communicator.disconnect()


async def test_session_socket_gets_its_sessions_spans_as_oob_rows(user):
    sid = "locomo:conv-26"
    communicator, connected = await _connect(f"/ws/sessions/{session_safe_id(sid)}/", user)
    try:
        assert connected
        await get_channel_layer().group_send(
            session_group(sid), {"type": "span.finished", "span": _span(session_id=sid)}
        )
        html = await communicator.receive_from(timeout=2)
        assert 'hx-swap-oob="afterbegin:#span-rows"' in html
        assert f'id="span-{"a" * 16}"' in html
        # No raw span on the timeline: it lists compress records, as a reload does.
        assert "#timeline" not in html
        assert await communicator.receive_nothing(timeout=0.2)
    finally:
        await communicator.disconnect()


async def test_feed_socket_applies_the_traces_filters(user):
    communicator, connected = await _connect("/ws/feed/?op=scroll.expand&errors=1", user)
    try:
        assert connected
        layer = get_channel_layer()
        await layer.group_send(SPANS, {"type": "span.finished", "span": _span("scroll.evict")})
        await layer.group_send(
            SPANS, {"type": "span.finished", "span": _span("scroll.expand", span_id="c" * 16)}
        )
        wanted = _span("scroll.expand", span_id="d" * 16, status="error")
        await layer.group_send(SPANS, {"type": "span.finished", "span": wanted})
        html = await communicator.receive_from(timeout=2)
        assert f'id="span-{"d" * 16}"' in html
        assert await communicator.receive_nothing(timeout=0.2)
    finally:
        await communicator.disconnect()


async def test_span_content_with_html_is_escaped(user):
    communicator, _ = await _connect("/ws/feed/", user)
    try:
        evil = _span(
            "scroll.search",
            span_id="9" * 16,
            attributes={"scroll.query": "<script>alert(1)</script>"},
            status="error",
            status_message="<img src=x onerror=alert(2)>",
        )
        await get_channel_layer().group_send(SPANS, {"type": "span.finished", "span": evil})
        html = await communicator.receive_from(timeout=2)
        assert "<script>" not in html and "<img" not in html
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    finally:
        await communicator.disconnect()


async def test_alert_change_updates_the_header_count_on_every_socket(user):
    from dashboard.telemetry.models import Alert, AlertRule

    def make():
        rule, _ = AlertRule.objects.get_or_create(kind=AlertRule.SPAN_REREAD)
        return Alert.objects.create(rule=rule, session_id="s1", message="t0:1-9 re-read 3 times")

    alert = await sync_to_async(make)()
    alert_dict = await sync_to_async(alert.to_dict)()
    communicator, _ = await _connect("/ws/alerts/", user)
    try:
        await get_channel_layer().group_send(ALERTS, {"type": "alert.changed", "alert": alert_dict})
        count = await communicator.receive_from(timeout=2)
        row = await communicator.receive_from(timeout=2)
        assert '<span id="alert-count" hx-swap-oob="true" class="badge hot"' in count
        assert ">1</span>" in count
        # One frame for the row: the page drops the row it showed as this one goes in.
        assert row.startswith('<tbody hx-swap-oob="afterbegin:#alerts-open" data-move>')
        assert f'<tr id="alert-{alert.pk}"' in row
        assert "re-read 3 times" in row
    finally:
        await communicator.disconnect()


async def test_alerts_socket_ignores_spans(user):
    communicator, _ = await _connect("/ws/alerts/", user)
    try:
        await get_channel_layer().group_send(SPANS, {"type": "span.finished", "span": _span()})
        assert await communicator.receive_nothing(timeout=0.2)
    finally:
        await communicator.disconnect()


async def test_session_change_replaces_the_sessions_row(user, console_log):
    communicator, _ = await _connect("/ws/feed/?spans=0", user)
    try:
        await get_channel_layer().group_send(
            SPANS, {"type": "session.changed", "session_id": "run:1", "summary": {}}
        )
        html = await communicator.receive_from(timeout=2)
        assert (
            f'<tr id="session-{session_safe_id("run:1")}" class="session" hx-swap-oob="true">'
            in html
        )
    finally:
        await communicator.disconnect()


async def test_a_burst_of_session_changes_costs_the_sessions_page_one_row_per_session(
    user, console_log, monkeypatch
):
    from dashboard.console import consumers

    # A wait longer than the six sends take on a loaded machine, so they are one burst.
    monkeypatch.setattr(consumers, "REFRESH_DELAY_S", 1.0)
    for sid in ("run:a", "run:b"):
        await sync_to_async(console_log.append)(session_id=sid, kind="context_msg", content="x")
    communicator, _ = await _connect("/ws/feed/?spans=0", user)
    try:
        for sid in ("run:a", "run:b", "run:a", "run:a", "run:b", "run:a"):
            await get_channel_layer().group_send(
                SPANS, {"type": "session.changed", "session_id": sid, "summary": {}}
            )
        frames = await _drain(communicator)
        rows = [f for f in frames if 'class="session"' in f]
        assert len(rows) == 2, frames
        # In the order they last changed: b, then a.
        assert session_safe_id("run:b") in rows[0] and session_safe_id("run:a") in rows[1]
    finally:
        await communicator.disconnect()


async def test_a_traces_page_socket_is_sent_no_session_rows(user, console_log):
    # The traces page has no sessions table: a session change must cost it no query and no
    # frame (under load those queries held its span frames back), while spans still arrive.
    await sync_to_async(console_log.append)(session_id="run:1", kind="context_msg", content="x")
    communicator, _ = await _connect("/ws/feed/", user)
    try:
        await get_channel_layer().group_send(
            SPANS, {"type": "session.changed", "session_id": "run:1", "summary": {}}
        )
        assert await communicator.receive_nothing(timeout=0.2)
        await get_channel_layer().group_send(
            SPANS, {"type": "span.finished", "span": _span(span_id="8" * 16)}
        )
        assert f'id="span-{"8" * 16}"' in await communicator.receive_from(timeout=2)
    finally:
        await communicator.disconnect()


async def test_a_socket_records_the_servers_loop_and_thread_sends_reach_it(user):
    import asyncio

    from dashboard import push

    communicator, connected = await _connect("/ws/feed/", user)
    try:
        assert connected
        assert push.server_loop() is asyncio.get_running_loop()
        # The span sink's worker is a plain thread: its send must land on this loop.
        ok = await asyncio.to_thread(
            push.send_group, SPANS, {"type": "span.finished", "span": _span(span_id="7" * 16)}
        )
        assert ok
        html = await communicator.receive_from(timeout=2)
        assert f'id="span-{"7" * 16}"' in html
    finally:
        await communicator.disconnect()


async def test_a_brand_new_session_is_inserted_at_the_top_of_the_first_page(user, console_log):
    sid = "run:new"
    communicator, _ = await _connect("/ws/feed/?spans=0&sessions=1", user)
    try:
        await sync_to_async(console_log.append)(
            session_id=sid, kind="context_msg", role="user", content="<b>hi</b>"
        )
        await get_channel_layer().group_send(
            SPANS, {"type": "session.changed", "session_id": sid, "summary": {}}
        )
        move = await communicator.receive_from(timeout=2)
        safe = session_safe_id(sid)
        # One frame: the row lands first in the table body, counting the new event; the page
        # (static/scroll.js) drops the row it had, and the empty-log note, in the same swap.
        assert move.startswith(
            '<tbody hx-swap-oob="afterbegin:#session-rows" data-move data-removes="sessions-empty">'
        )
        assert f'<tr id="session-{safe}" class="session">' in move
        assert f'href="/sessions/{sid}/"' in move
        assert '<td class="num">1</td>' in move
        assert await communicator.receive_nothing(timeout=0.2)
    finally:
        await communicator.disconnect()


def test_the_first_sessions_page_asks_for_new_rows_and_later_pages_do_not(client, console_log):
    from django.contrib.auth import get_user_model

    client.force_login(get_user_model().objects.create_user("v2", password="pw"))
    first = client.get("/").content.decode()
    assert 'ws-connect="/ws/feed/?spans=0&amp;seq_after=0&amp;runs_after=' in first
    assert '&amp;sessions=1"' in first
    assert 'id="session-rows"' in first  # present even while the log is empty
    searched = client.get("/?q=anything").content.decode()
    assert 'ws-connect="/ws/feed/?spans=0&amp;' in searched
    assert "sessions=1" not in searched


async def test_a_batch_of_spans_arrives_as_one_frame_newest_on_top(user):
    sid = "locomo:conv-26"
    communicator, _ = await _connect(f"/ws/sessions/{session_safe_id(sid)}/", user)
    try:
        spans = [
            _span("scroll.search", session_id=sid, span_id="4" * 16),
            _span("scroll.evict", session_id=sid, span_id="5" * 16),
            _span("scroll.search", session_id=sid, span_id="6" * 16),
        ]
        await get_channel_layer().group_send(
            session_group(sid), {"type": "spans.finished", "spans": spans}
        )
        rows = await communicator.receive_from(timeout=2)
        ids = [rows.index(f'id="span-{c * 16}"') for c in "654"]
        assert ids == sorted(ids)  # one body prepended whole: the newest first, on top
        assert rows.count('hx-swap-oob="afterbegin:#span-rows"') == 1
        assert await communicator.receive_nothing(timeout=0.2)
    finally:
        await communicator.disconnect()


# -- catch-up: what was stored between the page rendering and its socket connecting ------


def _store_span(**kw):
    from dashboard.telemetry.models import SpanRecord

    span = _span(**kw)
    span.pop("session_id")
    span["status_message"] = ""
    return SpanRecord.objects.create(session_id=kw.get("session_id") or "", **span)


def _ws_url(html):
    import html as html_lib
    import re

    return html_lib.unescape(re.search(r'ws-connect="([^"]+)"', html).group(1))


async def test_a_span_stored_after_the_traces_page_rendered_reaches_it_once(user):
    from django.test import Client

    def render():
        client = Client()
        client.force_login(user)
        _store_span(span_id="1" * 16, name="scroll.expand")
        return client.get("/traces/?op=scroll.expand").content.decode()

    html = await sync_to_async(render)()
    assert f'id="span-{"1" * 16}"' in html
    # Finished after the page was drawn, before its socket connected:
    late = await sync_to_async(_store_span)(span_id="2" * 16, name="scroll.expand")
    await sync_to_async(_store_span)(span_id="3" * 16, name="scroll.evict")  # filtered out
    communicator, connected = await _connect(_ws_url(html), user)
    try:
        assert connected
        (frame,) = await _span_frames(communicator, 1)
        assert f'id="span-{"2" * 16}"' in frame
        assert "1" * 16 not in frame and "3" * 16 not in frame
        assert await communicator.receive_nothing(timeout=0.2)
        # The sink's own message for the same span, arriving late, is not shown twice ...
        late_dict = await sync_to_async(late.to_dict)()
        await get_channel_layer().group_send(SPANS, {"type": "span.finished", "span": late_dict})
        assert await communicator.receive_nothing(timeout=0.2)
        # ... while a newer one still streams in.
        newer = await sync_to_async(_store_span)(span_id="4" * 16, name="scroll.expand")
        newer_dict = await sync_to_async(newer.to_dict)()
        await get_channel_layer().group_send(SPANS, {"type": "span.finished", "span": newer_dict})
        assert f'id="span-{"4" * 16}"' in await communicator.receive_from(timeout=2)
    finally:
        await communicator.disconnect()


async def test_catch_up_is_bounded_and_shows_the_newest_on_top(user, settings):
    from dashboard.console import live

    def store():
        return [_store_span(span_id=f"{i:016x}", name="scroll.search").id for i in range(205)]

    ids = await sync_to_async(store)()
    communicator, _ = await _connect(f"/ws/feed/?span_after={ids[0] - 1}", user)
    try:
        frame = await communicator.receive_from(timeout=2)
        assert frame.count("<tr ") == live.CATCH_UP_ROWS
        assert f'id="span-{4:016x}"' not in frame  # the oldest five are left out
        assert frame.index(f"span-{204:016x}") < frame.index(f"span-{5:016x}")
    finally:
        await communicator.disconnect()


async def test_session_socket_catches_up_spans_compresses_and_newer_events(user, console_log):
    from dashboard.runs.models import CompressEvent

    sid = "run:late"
    seq = await sync_to_async(console_log.append)(
        session_id=sid, kind="context_msg", role="user", content="go"
    )

    def after_render():
        _store_span(span_id="5" * 16, name="scroll.evict", session_id=sid)
        _store_span(span_id="6" * 16, name="scroll.evict", session_id="other")
        console_log.append(session_id=sid, kind="model_turn", role="assistant", content="ok")
        return CompressEvent.objects.create(session_id=sid, action="evict", tokens_before=900)

    compress = await sync_to_async(after_render)()
    path = (
        f"/ws/sessions/{session_safe_id(sid)}/?session=run%3Alate&span_after=0"
        f"&compress_after=0&change_after=0&seq_after={seq}"
    )
    communicator, _ = await _connect(path, user)
    try:
        parts = ("session-summary", "session-index", "session-kernel", "session-figures")
        frames = await _drain(
            communicator,
            until=lambda got: all(
                any(f'id="{p}" hx-swap-oob="true"' in f for f in got) for p in parts
            ),
        )
        rows = frames[0]
        assert f'id="span-{"5" * 16}"' in rows and "6" * 16 not in rows
        # The live parts, re-rendered: header, index, kernel and chart figures ...
        for part in parts:
            assert sum(f'id="{part}" hx-swap-oob="true"' in f for f in frames) == 1, part
        header = next(f for f in frames if 'id="session-summary"' in f)
        assert '<dd id="session-events">2</dd>' in header
        # ... the compress record on the timeline, and the "newer" link.
        (timeline,) = [f for f in frames if 'hx-swap-oob="afterbegin:#timeline"' in f]
        assert f'id="compress-{compress.pk}"' in timeline
        assert f'id="timeline-{"5" * 16}"' not in "".join(frames)
        (newer,) = [f for f in frames if 'id="events-newer"' in f]
        assert f'<a id="events-newer" rel="next" href="?after={seq}"' in newer
        assert 'hx-swap-oob="true"' in newer
    finally:
        await communicator.disconnect()


async def _drain(
    communicator, first_within: float = 10.0, until: Callable[[list[str]], bool] | None = None
) -> list[str]:
    """The frames of the next burst. Its first frame is waited for (a refresh goes out
    REFRESH_DELAY_S after the change, plus its queries: later on a loaded machine, where a
    fixed 0.3 s of silence read as "nothing came"), and with ``until``, every frame until
    ``until(frames)`` holds, within ``first_within`` too (a burst sent in two goes, such as a
    socket's catch-up and the refresh that follows it, may pause longer than the silence
    that ends it on a loaded machine); the rest follow at once."""
    deadline = time.monotonic() + first_within
    frames = [await communicator.receive_from(timeout=first_within)]
    while until is not None and not until(frames):
        left = deadline - time.monotonic()
        assert left > 0, f"the burst never completed: {frames}"
        frames.append(await communicator.receive_from(timeout=left))
    while not await communicator.receive_nothing(timeout=0.3):
        frames.append(await communicator.receive_from(timeout=1))
    return frames


async def test_a_session_change_re_sends_the_header_and_new_timeline_entries(user, console_log):
    from dashboard.runs.models import CompressEvent

    sid = "run:steps"
    await sync_to_async(console_log.append)(
        session_id=sid, kind="context_msg", role="user", content="go"
    )
    path = (
        f"/ws/sessions/{session_safe_id(sid)}/?session=run%3Asteps&compress_after=0&change_after=0"
    )
    communicator, _ = await _connect(path, user)
    try:
        await _drain(communicator)  # the parts as they were

        def step():
            console_log.append(session_id=sid, kind="model_turn", role="assistant", content="x")
            return CompressEvent.objects.create(
                session_id=sid, action="evict", evicted_lo=1, evicted_hi=1
            )

        compress = await sync_to_async(step)()
        message = {"type": "session.changed", "session_id": sid, "summary": {}}
        await get_channel_layer().group_send(session_group(sid), message)
        frames = await _drain(communicator)
        header = next(f for f in frames if 'id="session-summary"' in f)
        assert '<dd id="session-events">2</dd>' in header
        assert sum(f'id="compress-{compress.pk}"' in f for f in frames) == 1
        # Sent once: the next change brings no repeat of that entry.
        await get_channel_layer().group_send(session_group(sid), message)
        assert not any("compress-" in f for f in await _drain(communicator))
    finally:
        await communicator.disconnect()


async def test_the_cost_panel_follows_each_recorded_call_live(user, console_log):
    """Issue 29: a call recorded while the page is open shows up priced at once, not at the
    next reload."""
    from dashboard.record.store import store_calls
    from dashboard.telemetry.models import ModelPrice
    from scroll_core import wire

    sid = "gw:live-cost"
    await sync_to_async(console_log.append)(
        session_id=sid, kind="context_msg", role="user", content="go"
    )
    await sync_to_async(ModelPrice.objects.create)(
        model="priced-model", input_per_mtok=2, output_per_mtok=10
    )

    def record(n: int) -> None:
        body = b'{"model":"priced-model","messages":[{"role":"user","content":"go %d"}]}' % n
        store_calls([wire.WireCall(sid, "priced-model", "gateway", body=body, sends=1,
                                   started_at=1.0e9 + n, usage={"input_tokens": 1000,
                                   "output_tokens": 100})])  # fmt: skip

    path = (
        f"/ws/sessions/{session_safe_id(sid)}/?session={sid}&compress_after=0&change_after=0"
        "&calls_after=0"
    )
    communicator, _ = await _connect(path, user)
    try:
        await _drain(communicator)
        message = {"type": "session.changed", "session_id": sid, "summary": {}}
        message = {"type": "session.changed", "session_id": sid, "summary": {}}
        await get_channel_layer().group_send(session_group(sid), message)
        # Nothing recorded since the page: the panel it rendered stays (no needless swap).
        assert not any('id="session-cost"' in f for f in await _drain(communicator))
        for n in (1, 2):
            await sync_to_async(record)(n)
            await get_channel_layer().group_send(session_group(sid), message)
            frames = await _drain(communicator)
            panel = next(f for f in frames if 'id="session-cost"' in f)
            assert 'hx-swap-oob="true"' in panel
            assert f"{n} model call{'s' if n > 1 else ''}" in panel
            # 1,000 in at 2/M and 100 out at 10/M: 0.003 per call.
            assert f"{0.003 * n:.6f} USD" in panel
    finally:
        await communicator.disconnect()


async def test_the_hidden_compress_none_count_follows_new_records_live(user, console_log):
    from dashboard.runs.models import CompressEvent

    sid = "run:quiet"
    await sync_to_async(console_log.append)(
        session_id=sid, kind="context_msg", role="user", content="go"
    )
    path = (
        f"/ws/sessions/{session_safe_id(sid)}/?session=run%3Aquiet&compress_after=0&change_after=0"
    )
    communicator, _ = await _connect(path, user)
    try:
        await _drain(communicator)
        message = {"type": "session.changed", "session_id": sid, "summary": {}}
        for expected in ("show 1 “compress none” row ", "show 2 “compress none” rows"):
            await sync_to_async(CompressEvent.objects.create)(session_id=sid, action="none")
            await get_channel_layer().group_send(session_group(sid), message)
            frames = await _drain(communicator)
            (pager,) = [f for f in frames if 'id="timeline-pager"' in f]
            assert 'hx-swap-oob="true"' in pager and expected in pager
            # A "none" record changes the count only: no timeline row for it.
            assert not any("afterbegin:#timeline" in f for f in frames)
        # Nothing new: no pager frame.
        await get_channel_layer().group_send(session_group(sid), message)
        assert not any('id="timeline-pager"' in f for f in await _drain(communicator))
    finally:
        await communicator.disconnect()


async def test_the_runs_socket_replaces_a_changed_runs_row(user):
    from dashboard.runs.models import RunRecord

    run = await sync_to_async(RunRecord.objects.create)(
        session_id="run:r1", task="t", model_name="m", status="running"
    )
    communicator, _ = await _connect("/ws/feed/?spans=0&runs=1", user)
    try:
        run.status = "done"
        await sync_to_async(run.save)()
        message = {"type": "session.changed", "session_id": run.session_id, "summary": {}}
        await get_channel_layer().group_send(SPANS, message)
        replace, insert = (
            await communicator.receive_from(timeout=2),
            await communicator.receive_from(timeout=2),
        )
        assert f'<tr id="run-{run.pk}"' in replace and 'hx-swap-oob="true"' in replace
        assert '<td class="run-status">done</td>' in replace
        assert 'hx-swap-oob="afterbegin:#run-rows"' in insert
        assert 'id="session-' not in replace + insert  # no sessions-table rows here
    finally:
        await communicator.disconnect()


async def test_the_kernels_socket_re_sends_the_table_on_connect_and_on_change(user):
    communicator, _ = await _connect("/ws/feed/?spans=0&kernels=1", user)
    try:
        first = await communicator.receive_from(timeout=2)
        assert '<div id="kernels-table" hx-swap-oob="true">' in first
        assert "No live kernels." in first
        message = {"type": "session.changed", "session_id": "run:k", "summary": {}}
        await get_channel_layer().group_send(SPANS, message)
        assert 'id="kernels-table"' in await communicator.receive_from(timeout=2)
    finally:
        await communicator.disconnect()


async def test_session_socket_ignores_a_cursor_for_another_session(user):
    await sync_to_async(_store_span)(span_id="7" * 16, session_id="a")
    path = f"/ws/sessions/{session_safe_id('a')}/?session=b&span_after=0"
    communicator, connected = await _connect(path, user)
    try:
        assert connected
        assert await communicator.receive_nothing(timeout=0.2)
    finally:
        await communicator.disconnect()


async def test_an_alert_raised_after_the_page_rendered_reaches_it(user):
    from urllib.parse import quote

    from django.utils import timezone

    from dashboard.telemetry.models import Alert, AlertRule

    rendered = quote((timezone.now() - timezone.timedelta(seconds=10)).isoformat())

    def make():
        rule, _ = AlertRule.objects.get_or_create(kind=AlertRule.INDEX_GAP)
        return Alert.objects.create(rule=rule, session_id="s9", message="gap at 12")

    alert = await sync_to_async(make)()
    communicator, _ = await _connect(f"/ws/alerts/?alerts_after={rendered}", user)
    try:
        count = await communicator.receive_from(timeout=2)
        row = await communicator.receive_from(timeout=2)
        assert ">1</span>" in count
        assert 'hx-swap-oob="afterbegin:#alerts-open" data-move' in row and "gap at 12" in row
        assert f'<tr id="alert-{alert.pk}"' in row
        assert await communicator.receive_nothing(timeout=0.2)
    finally:
        await communicator.disconnect()
    # A page drawn after the alert gets nothing more.
    later = quote((timezone.now() + timezone.timedelta(seconds=10)).isoformat())
    communicator, _ = await _connect(f"/ws/alerts/?alerts_after={later}", user)
    try:
        assert await communicator.receive_nothing(timeout=0.2)
    finally:
        await communicator.disconnect()


async def test_a_session_written_after_the_sessions_page_rendered_is_inserted(user, console_log):
    seq = await sync_to_async(console_log.append)(
        session_id="run:old", kind="context_msg", role="user", content="old"
    )
    await sync_to_async(console_log.append)(
        session_id="run:late", kind="context_msg", role="user", content="late"
    )
    communicator, _ = await _connect(f"/ws/feed/?spans=0&sessions=1&seq_after={seq}", user)
    try:
        move = await communicator.receive_from(timeout=2)
        safe = session_safe_id("run:late")
        assert 'hx-swap-oob="afterbegin:#session-rows" data-move' in move
        assert f'<tr id="session-{safe}" class="session">' in move
        assert await communicator.receive_nothing(timeout=0.2)
    finally:
        await communicator.disconnect()


async def test_a_caught_up_compress_shows_once_on_the_session_timeline(user, console_log):
    from dashboard.runs.models import CompressEvent

    sid = "run:once"

    def after_render():
        _store_span(span_id="8" * 16, name="scroll.compress", session_id=sid)
        CompressEvent.objects.create(session_id=sid, action="evict", tokens_before=900)

    await sync_to_async(after_render)()
    path = (
        f"/ws/sessions/{session_safe_id(sid)}/?session=run%3Aonce&span_after=0"
        "&compress_after=0&change_after=0"
    )
    communicator, _ = await _connect(path, user)
    try:
        joined = "\n".join(await _drain(communicator))
        # The record is the timeline entry (the span stays in the feed only).
        assert joined.count('id="compress-') == 1
        assert f'id="timeline-{"8" * 16}"' not in joined
    finally:
        await communicator.disconnect()


async def test_a_span_committed_late_below_the_pages_cursor_still_reaches_it(user):
    """Two producers: one's row takes id n+1 but commits after the page showed id n+2."""
    from django.test import Client

    def render():
        first = _store_span(span_id="1" * 16, name="scroll.expand")
        # Another producer's row already holds the next id but has not committed yet.
        _store_span(span_id="3" * 16, name="scroll.expand", id=first.id + 2)
        client = Client()
        client.force_login(user)
        return first.id, client.get("/traces/?op=scroll.expand").content.decode()

    first_id, html = await sync_to_async(render)()
    from urllib.parse import parse_qs, urlsplit

    from dashboard.console import live

    cursor = parse_qs(urlsplit(_ws_url(html)).query)
    assert cursor["span_after"] == [str(first_id + 2)]
    assert first_id + 1 in live.gaps_cursor(cursor["span_gaps"][0])
    await sync_to_async(_store_span)(span_id="2" * 16, name="scroll.expand", id=first_id + 1)
    communicator, connected = await _connect(_ws_url(html), user)
    try:
        assert connected
        (frame,) = await _span_frames(communicator, 1)
        assert f'id="span-{"2" * 16}"' in frame
        assert "1" * 16 not in frame and "3" * 16 not in frame
    finally:
        await communicator.disconnect()


async def test_a_live_span_with_a_lower_id_than_one_already_sent_is_still_sent(user):
    sid = "locomo:conv-26"
    path = f"/ws/sessions/{session_safe_id(sid)}/?session={sid}&span_after=0"
    communicator, connected = await _connect(path, user)
    layer = get_channel_layer()
    try:
        assert connected
        for span_id, row_id in (("2" * 16, 20), ("1" * 16, 10), ("2" * 16, 20)):
            span = _span(name="scroll.expand", session_id=sid, span_id=span_id, id=row_id)
            await layer.group_send(session_group(sid), {"type": "span.finished", "span": span})
        first, second = await _span_frames(communicator, 2)
        assert f'id="span-{"2" * 16}"' in first
        # Another producer's span, with a lower id, arrives after it: shown, not dropped ...
        assert f'id="span-{"1" * 16}"' in second
        # ... and a repeat of one already sent is skipped.
        assert await _no_span_frame(communicator)
    finally:
        await communicator.disconnect()
