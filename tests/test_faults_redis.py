"""The fault suite, Redis side (issue 30): the console's channel layer and the gateway's
shared limits on a Redis of this module's own, stopped for a few seconds, and restarted
twice in a row, while runs, gateway requests and pages are in flight. The Event Log is on
PostgreSQL as the writer login (``tests/fault_fixtures.py``), as in a scaled deployment.

Each test asserts what ``tests/faults.assert_nothing_lost`` says: every run started before
or during the fault finishes done after it, no event twice, ``session_stats`` equal to the
rows, only provider-shaped 503s from the gateway during the fault (it cannot hold a session
or count a key's tokens without Redis) and 200s after, no page answered 500. And the worker
logged the outage once per outage, without a traceback. Live pages through the same faults
are ``tests/test_live_redis.py``'s.
"""

from __future__ import annotations

import logging
import time

import pytest

from tests.faults import Fault, assert_nothing_lost, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def _outages_logged(records: list[logging.LogRecord]) -> tuple[int, int]:
    """(outages, ends) the channel layer logged; the worker and the layer logged no
    traceback and no error (the access log's line for a 503 is not one). The end is logged
    by the first send after it: the runs may all have ended before one was tried, so one is
    sent here (as the next run would) until it goes through."""
    from dashboard.push import send_groups

    wait_for(lambda: send_groups([("fault-probe", {"type": "fault.probe"})]), 10, "a send")
    ours = [r for r in records if r.name.startswith(("dashboard", "scroll"))]
    bad = [r for r in ours if r.exc_info or (r.levelno >= logging.ERROR
                                             and r.name != "dashboard.requests")]  # fmt: skip
    assert bad == [], [r.getMessage() for r in bad]
    down = sum("channel layer unreachable" in r.getMessage() for r in ours)
    back = sum("channel layer back after" in r.getMessage() for r in ours)
    return down, back


def test_redis_stopped_for_seconds_then_started(console_on_redis, workload, fault_log, caplog):
    caplog.set_level(logging.INFO)
    fault = Fault(
        "redis stopped",
        begin=console_on_redis.stop,
        end=console_on_redis.start,
        refusal_code="redis_unavailable",
    )
    out = workload.run_through(fault)
    assert_nothing_lost(out, fault, fault_log)
    assert _outages_logged(caplog.records) == (1, 1)


def test_redis_restarted_twice_in_a_row(console_on_redis, workload, fault_log, caplog):
    """Down, up for a moment, down again: the second outage meets connections pooled in
    the first moment back, and the runs' pushes, the gateway's limits and leases, and the
    worker's outage log each live through both."""
    caplog.set_level(logging.INFO)

    def restart() -> None:
        console_on_redis.start()
        time.sleep(0.5)

    fault = Fault(
        "redis restarted twice",
        begin=console_on_redis.stop,
        end=restart,
        refusal_code="redis_unavailable",
        times=2,
    )
    out = workload.run_through(fault)
    assert len(out.gateway_during) == 2
    assert_nothing_lost(out, fault, fault_log)
    down, back = _outages_logged(caplog.records)
    assert 1 <= down <= 2 and back == down
