"""The gateway while Redis, where several web processes share its rate limits, token budgets
and session leases, is stopped and started again (issue 30): a request answers 503 with
``Retry-After`` in the provider's shape, sends nothing upstream, and the official client's
retries get through once Redis is back."""

from __future__ import annotations

import httpx
import openai
import pytest
from gateway_clients import ask, make_key, oa

from dashboard.gateway.service import get_service, reset_service

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def redis_limits(settings, gateway, stoppable_redis):
    """The gateway's shared limits on ``stoppable_redis``; Redis runs again after the test."""
    settings.SCROLL_REDIS_URL = stoppable_redis.url
    reset_service()
    yield stoppable_redis.control
    stoppable_redis.control.start()
    reset_service()


def test_clients_get_a_retryable_503_while_redis_is_down_then_get_through(
    redis_limits, gateway, upstream, console_log
):
    key = make_key(upstream, agent="oa-redis")
    first = oa(gateway, key).chat.completions.with_raw_response.create(
        model="gpt-test", messages=[{"role": "user", "content": "hello"}]
    )
    session = first.headers["x-scroll-session"]
    get_service().flush()
    sent_upstream = len(upstream.requests)

    redis_limits.stop()
    during = httpx.post(
        f"{gateway}/v1/chat/completions",
        headers={"Authorization": f"Bearer {key}", "X-Scroll-Session": session},
        json={"model": "gpt-test", "messages": [{"role": "user", "content": "sent during"}]},
        timeout=30,
    )
    assert during.status_code == 503, during.text
    assert int(during.headers["retry-after"]) > 0
    assert during.json()["error"]["type"] == "service_unavailable"
    anthropic_during = httpx.post(
        f"{gateway}/v1/messages",
        headers={"x-api-key": key, "anthropic-version": "2023-06-01"},
        json={"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "x"}]},
        timeout=30,
    )
    assert anthropic_during.status_code == 503, anthropic_during.text
    assert anthropic_during.json()["error"]["type"] == "overloaded_error"
    assert int(anthropic_during.headers["retry-after"]) > 0
    assert len(upstream.requests) == sent_upstream  # nothing went upstream
    get_service().flush()
    texts = [e.content for e in console_log.session_events(session, limit=None)]
    assert not [t for t in texts if "during" in t]  # nor into the log

    redis_limits.start()
    retrying = openai.OpenAI(base_url=f"{gateway}/v1", api_key=key, max_retries=3)
    try:
        again = ask(retrying, [{"role": "user", "content": "after"}])
    finally:
        retrying.close()
    assert again.choices[0].message.content.startswith("ok")


def test_only_redis_being_unreachable_counts_as_an_outage(stoppable_redis):
    import redis

    from dashboard.layer_outage import redis_unreachable

    client = redis.Redis.from_url(stoppable_redis.url)
    try:
        with pytest.raises(redis.ResponseError) as bad_command:
            client.execute_command("NO-SUCH-COMMAND")
        assert not redis_unreachable(bad_command.value)  # a bug, answered as one
        stoppable_redis.control.stop()
        with pytest.raises(redis.ConnectionError) as refused:
            client.ping()
        assert redis_unreachable(refused.value)
        try:
            raise RuntimeError("admission failed") from refused.value
        except RuntimeError as wrapped:
            assert redis_unreachable(wrapped)
    finally:
        stoppable_redis.control.start()
        client.close()


def test_the_heartbeat_logs_a_redis_outage_once_and_its_end(
    settings, gateway, upstream, stoppable_redis, caplog
):
    import logging
    import time

    # A beat every 0.8 s. The lease must outlive a beat held up by a loaded machine: a beat
    # also writes the kernels to the database, and on PostgreSQL beside tests that create
    # and drop databases that write once took longer than a 0.6 s lease's margin, so the
    # session was lost before Redis stopped and no beat had a lease left to renew.
    settings.SCROLL_WORKER_LEASE_S = 2.4
    settings.SCROLL_REDIS_URL = stoppable_redis.url
    reset_service()
    caplog.set_level(logging.INFO, logger="dashboard.gateway")
    try:
        # A session served here: each beat renews its lease at Redis.
        ask(oa(gateway, make_key(upstream, agent="beat")), [{"role": "user", "content": "hi"}])
        time.sleep(0.3)
        assert "taken over" not in caplog.text, caplog.text
        stoppable_redis.control.stop()
        time.sleep(2.0)  # two beats or more
        stoppable_redis.control.start()
        deadline = time.monotonic() + 5
        while "heartbeat back" not in caplog.text:
            assert time.monotonic() < deadline, caplog.text
            time.sleep(0.05)
    finally:
        stoppable_redis.control.start()
        reset_service()
    beats = [r for r in caplog.records if "heartbeat" in r.getMessage()]
    assert [r.levelname for r in beats] == ["WARNING", "INFO"], caplog.text
    assert not any(r.exc_info for r in beats)
