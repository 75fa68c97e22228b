"""A run rides out its Event Log's PostgreSQL going away: stopped and started, or its
sessions killed, mid-run; the run finishes done, with no event twice."""

from __future__ import annotations

import time
from collections import Counter

import psycopg
import pytest

from dashboard.eventlog import get_event_log, reset_event_log
from dashboard.runs import runner
from dashboard.runs.models import RunRecord
from dashboard.runs.worker import Worker
from scroll_core.kernel import KernelConfig, KernelManager

pytestmark = pytest.mark.django_db(transaction=True)

CELL = "Run this.\n```python\nx = 6 * 7\nprint('answer', x)\n```"
PLAN = f"{CELL}\n---\n{CELL}\n---\n{CELL}"


@pytest.fixture
def own_log(settings, monkeypatch, console_log):
    """The console's Event Log on a PostgreSQL server of this test's own (it is stopped and
    started); the log itself gives up after 0.3 s, so the run's worker meets the outage."""
    from tests import servers

    monkeypatch.setenv("SCROLL_DB_OUTAGE_S", "0.3")
    try:
        with servers.postgres(own=True) as server:
            if server.control is None:
                pytest.skip("an external PostgreSQL server cannot be restarted by the tests")
            settings.SCROLL_EVENTLOG_URL = server.url
            reset_event_log()
            yield server
            reset_event_log()
    except servers.ServerUnavailable as exc:
        servers.unavailable("PostgreSQL", str(exc))


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _run_with_fault(fault) -> RunRecord:
    worker = Worker(kernels=KernelManager(KernelConfig(sandbox="process"), pool_size=0),
                    poll_s=0.05, outage_s=60).start()  # fmt: skip
    try:
        run = runner.start_run(PLAN, pause_s=1.5)
        _wait(lambda: RunRecord.objects.get(pk=run.pk).turns >= 1, 60, "the first turn")
        fault()
        _wait(lambda: RunRecord.objects.get(pk=run.pk).status != RunRecord.RUNNING, 90, "the end")
    finally:
        worker.shutdown()
    return RunRecord.objects.get(pk=run.pk)


def _assert_log_whole(url: str, session_id: str) -> None:
    events = get_event_log().session_events(session_id, limit=None)
    assert len({e.seq for e in events}) == len(events)
    keyed = Counter(e.dedup_key for e in events if e.dedup_key)
    assert [k for k, n in keyed.items() if n > 1] == []
    with psycopg.connect(url, autocommit=True) as db:
        counted = db.execute(
            "SELECT count(*), min(seq), max(seq) FROM events WHERE session_id = %s", (session_id,)
        ).fetchone()
        stats = db.execute(
            "SELECT events, first_seq, last_seq FROM session_stats WHERE session_id = %s",
            (session_id,),
        ).fetchone()
    assert tuple(stats) == tuple(counted)


def test_a_run_survives_a_postgres_restart_mid_run(own_log):
    def restart() -> None:
        own_log.control.stop()
        time.sleep(2.0)  # longer than the log's own 0.3 s: the run has to wait for it
        own_log.control.start()

    run = _run_with_fault(restart)
    assert (run.status, run.error) == (RunRecord.DONE, "")
    assert run.turns == 3
    _assert_log_whole(own_log.url, run.session_id)


def test_a_run_survives_its_sessions_being_killed_mid_run(own_log):
    def kill_sessions() -> None:
        with psycopg.connect(own_log.url, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )

    run = _run_with_fault(kill_sessions)
    assert (run.status, run.error) == (RunRecord.DONE, "")
    assert run.turns == 3
    _assert_log_whole(own_log.url, run.session_id)
