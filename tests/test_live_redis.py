"""Live pages on the Redis channel layer (issue 30), against a redis-server of this module's
own that the tests stop and start again: an idle page keeps its socket, a page whose layer
is down is told "live updates paused" instead of being refused or dropped and catches up
when Redis is back, and senders log an outage once instead of a traceback per message."""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time

import pytest
from asgiref.sync import sync_to_async
from channels.layers import channel_layers, get_channel_layer
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator

from dashboard.console.routing import websocket_urlpatterns
from dashboard.groups import SPANS
from dashboard.layer_outage import layer_outage
from dashboard.push import send_groups
from dashboard.settings import redis_channel_layer
from dashboard.span_frames import spans_message

pytestmark = pytest.mark.django_db(transaction=True)

PAUSED = 'id="live-status"'


@pytest.fixture
def redis_layer(settings, stoppable_redis):
    """The console's channel layer, as settings make it for SCROLL_REDIS_URL, on
    ``stoppable_redis``; Redis is running again after the test, whatever it did."""
    settings.CHANNEL_LAYERS = {"default": redis_channel_layer(stoppable_redis.url)}
    channel_layers.backends.clear()
    layer_outage.down_since = None
    yield stoppable_redis.control
    stoppable_redis.control.start()
    channel_layers.backends.clear()
    layer_outage.down_since = None


@pytest.fixture
async def user():
    from django.contrib.auth import get_user_model

    return await sync_to_async(get_user_model().objects.create_user)("viewer", password="pw")


def _span(span_id: str) -> dict:
    return {
        "id": None,
        "trace_id": "b" * 32,
        "span_id": span_id,
        "parent_id": None,
        "name": "scroll.evict",
        "start_ns": 1_700_000_000_000_000_000,
        "end_ns": 1_700_000_000_020_000_000,
        "duration_ms": 20.0,
        "status": "ok",
        "status_message": None,
        "attributes": {},
        "session_id": "s-live",
        "kind": "internal",
        "events": [],
    }


async def _open(path: str, user) -> WebsocketCommunicator:
    communicator = WebsocketCommunicator(URLRouter(websocket_urlpatterns), path)
    communicator.scope["user"] = user
    connected, _ = await communicator.connect(timeout=5)
    assert connected
    return communicator


async def _frame_with(communicator, text: str, timeout: float = 10.0) -> str:
    """The first frame holding ``text``, passing over others (alert counts, parts)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        frame = await communicator.receive_from(timeout=max(0.1, deadline - loop.time()))
        if text in frame:
            return frame


async def _push_gets_through(communicator, span_id: str) -> None:
    await get_channel_layer().group_send(SPANS, spans_message([_span(span_id)]))
    await _frame_with(communicator, f'id="span-{span_id}"', timeout=5)


async def test_an_idle_page_keeps_its_socket_past_the_old_drop_and_still_gets_a_push(
    redis_layer, user
):
    communicator = await _open("/ws/feed/", user)
    try:
        # redis-py 8 read the layer's 5 s blocking pop with a 5 s socket timeout: the
        # consumer died ("Timeout reading from ...") and the page lost its socket.
        await asyncio.sleep(7.5)
        await _push_gets_through(communicator, "a" * 16)
    finally:
        await communicator.disconnect()


async def test_a_page_opened_while_redis_is_down_opens_paused_then_catches_up(redis_layer, user):
    redis_layer.stop()
    communicator = await _open("/ws/feed/", user)  # not a handshake 500
    try:
        paused = await _frame_with(communicator, PAUSED)
        assert "hidden" not in paused and "Live updates paused" in paused
        await sync_to_async(redis_layer.start)()
        resumed = await _frame_with(communicator, PAUSED)
        assert "hidden" in resumed
        await _push_gets_through(communicator, "c" * 16)  # it joined its groups again
    finally:
        await communicator.disconnect()


async def _stored_span(span_id: str) -> int:
    from dashboard.telemetry.models import SpanRecord

    def store() -> int:
        row = SpanRecord.objects.create(
            trace_id="d" * 32, span_id=span_id, name="scroll.expand", session_id="s-live",
            start_ns=1, end_ns=2, duration_ms=1.0, status="ok",
        )  # fmt: skip
        return int(row.id)

    return await sync_to_async(store)()


async def test_an_open_page_pauses_through_two_restarts_and_catches_up_after_each(
    redis_layer, user
):
    communicator = await _open("/ws/feed/?span_after=0", user)
    try:
        for restart, span_id in enumerate(("e" * 16, "f" * 16)):
            await sync_to_async(redis_layer.stop)()
            assert "hidden" not in await _frame_with(communicator, PAUSED)
            # Stored while the page could not be told: the catch-up sends it.
            await _stored_span(span_id)
            await sync_to_async(redis_layer.start)()
            assert "hidden" in await _frame_with(communicator, PAUSED)
            await _frame_with(communicator, f'id="span-{span_id}"')
            await _push_gets_through(communicator, str(restart) * 16)
    finally:
        await communicator.disconnect()


def test_senders_log_an_outage_once_and_its_end_once(redis_layer, caplog):
    caplog.set_level(logging.INFO)
    message = spans_message([_span("9" * 16)])
    redis_layer.stop()
    # A worker thread's sends, as a busy run makes them: none raises, none logs a traceback.
    results: list[bool] = []
    sender = threading.Thread(
        target=lambda: results.extend(send_groups([(SPANS, message)]) for _ in range(300))
    )
    sender.start()
    sender.join(30)
    assert results == [False] * 300
    redis_layer.start()
    # Dropped at once until the next probe (at most PROBE_EVERY_S later) finds it back.
    deadline = time.monotonic() + 5
    while not send_groups([(SPANS, message)]):
        assert time.monotonic() < deadline, "the layer was not tried again"
        time.sleep(0.05)
    records = [r for r in caplog.records if r.name.startswith("dashboard")]
    assert [r.levelname for r in records] == ["WARNING", "INFO"], records
    assert "live updates paused" in records[0].getMessage()
    back = re.search(r"back after .* \((\d+) messages were not sent", records[1].getMessage())
    assert back is not None and int(back[1]) >= 300
    assert not any(r.exc_info for r in caplog.records)


def test_the_first_send_after_a_restart_goes_through_on_a_connection_pooled_before_it(
    redis_layer, caplog
):
    """A connection pooled before the restart fails its next command once; the message it
    carried is sent again on a fresh one, not dropped, and no outage is logged."""
    from dashboard import push

    caplog.set_level(logging.INFO)
    # A server's loop, which keeps its layer's connection pool between sends.
    loop = asyncio.new_event_loop()
    runner = threading.Thread(target=loop.run_forever, daemon=True)
    runner.start()
    asyncio.run_coroutine_threadsafe(asyncio.sleep(0), loop).result(5)
    push.remember_server_loop(loop)
    try:
        message = spans_message([_span("8" * 16)])
        assert send_groups([(SPANS, message)])  # pools a connection
        redis_layer.stop()
        redis_layer.start()
        assert send_groups([(SPANS, message)])
    finally:
        push._server_loop = None
        asyncio.run_coroutine_threadsafe(get_channel_layer().close_pools(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        runner.join(5)
        loop.close()
    assert not [r for r in caplog.records if r.name == "dashboard.layer"]


CELL = "Run this.\n```python\nx = 6 * 7\nprint('answer', x)\n```"


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_a_run_finishes_through_two_redis_restarts_and_its_worker_logs_no_traceback(
    redis_layer, live_runner, caplog
):
    from dashboard.runs import runner
    from dashboard.runs.models import RunRecord

    caplog.set_level(logging.INFO)
    run = runner.start_run("\n---\n".join([CELL] * 16), pause_s=0.5)  # 8 s and more
    _wait(lambda: RunRecord.objects.get(pk=run.pk).turns >= 1, 60, "the first turn")
    for _ in range(2):
        redis_layer.stop()
        time.sleep(1.5)
        redis_layer.start()
        time.sleep(1.5)
    _wait(lambda: RunRecord.objects.get(pk=run.pk).status != RunRecord.RUNNING, 90, "the end")
    run.refresh_from_db()
    assert (run.status, run.error) == (RunRecord.DONE, "")
    ours = [r for r in caplog.records if r.name.startswith(("dashboard", "scroll"))]
    assert not [r for r in ours if r.exc_info or r.levelno >= logging.ERROR]
    down = [r for r in ours if "channel layer unreachable" in r.getMessage()]
    back = [r for r in ours if "channel layer back after" in r.getMessage()]
    assert 1 <= len(down) <= 2 and len(back) == len(down)


async def test_every_page_of_a_process_joins_again_after_a_quick_restart(redis_layer, user):
    # One blocking pop serves all of a process's sockets, yet every socket's groups went with
    # the Redis that restarted empty: each must notice, and join again.
    pages = [await _open("/ws/feed/", user) for _ in range(3)]
    try:
        await sync_to_async(redis_layer.stop)()
        await sync_to_async(redis_layer.start)()
        for page in pages:
            assert "hidden" not in await _frame_with(page, PAUSED)
            assert "hidden" in await _frame_with(page, PAUSED)
        await get_channel_layer().group_send(SPANS, spans_message([_span("7" * 16)]))
        for page in pages:
            await _frame_with(page, f'id="span-{"7" * 16}"', timeout=5)
    finally:
        for page in pages:
            await page.disconnect()
