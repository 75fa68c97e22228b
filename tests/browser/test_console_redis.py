"""A live page in a real browser while Redis, the channel layer, goes away (issue 30): the
page says "live updates paused" (an open page, and one loaded during the outage, whose
socket is accepted, not refused), and when Redis is back it hides the notice, shows what was
stored meanwhile and takes live rows again."""

from __future__ import annotations

import time

import pytest
from channels.layers import channel_layers

from dashboard.groups import SPANS
from dashboard.settings import redis_channel_layer
from tests.browser.conftest import shoot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PAUSED = "#live-status:not([hidden])"
RESUMED = "#live-status[hidden]"


@pytest.fixture
def redis_layer(settings):
    """The live server's channel layer on a Redis of this test's own; its control."""
    from tests import servers

    try:
        with servers.redis(own=True) as server:
            settings.CHANNEL_LAYERS = {"default": redis_channel_layer(server.url)}
            channel_layers.backends.clear()
            yield server.control
            channel_layers.backends.clear()
    except servers.ServerUnavailable as exc:
        servers.unavailable("Redis", str(exc))


def _span(span_id: str) -> dict:
    now = time.time_ns()
    return {
        "trace_id": "c" * 32, "span_id": span_id, "parent_id": None, "name": "scroll.search",
        "start_ns": now - 5_000_000, "end_ns": now, "duration_ms": 5.0, "status": "ok",
        "status_message": None, "attributes": {}, "session_id": "s-redis", "kind": "internal",
        "events": [],
    }  # fmt: skip


def _store(span_id: str) -> None:
    from dashboard.telemetry.models import SpanRecord
    from scroll_core.telemetry import SpanRecord as CoreSpan

    span = _span(span_id)
    SpanRecord.from_core(CoreSpan(**span)).save()


def test_a_page_says_live_updates_are_paused_and_catches_up_when_redis_is_back(page, redis_layer):
    from dashboard.push import send_group

    page.goto(f"{page.base}/traces/")
    page.wait_for_function("document.body.dataset.live === 'open'", timeout=10_000)
    assert page.is_hidden("#live-status")

    redis_layer.stop()
    page.wait_for_selector(PAUSED, timeout=10_000)
    assert "Live updates paused" in page.inner_text("#live-status")

    # Loaded during the outage: the socket opens (no handshake 500) and says it is paused.
    page.reload()
    page.wait_for_function("document.body.dataset.live === 'open'", timeout=10_000)
    page.wait_for_selector(PAUSED, timeout=10_000)
    shoot(page, "live-paused")
    _store("1" * 16)  # stored while the page cannot be told

    redis_layer.start()
    page.wait_for_selector(RESUMED, state="attached", timeout=15_000)
    page.wait_for_selector(f"#span-{'1' * 16}", timeout=10_000)  # the catch-up
    assert send_group(SPANS, {"type": "span.finished", "span": _span("2" * 16)})
    page.wait_for_selector(f"#span-{'2' * 16}", timeout=10_000)  # live again
