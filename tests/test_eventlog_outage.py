"""The PostgreSQL Event Log rides out its database going away: a restart or killed sessions
cost no caller an error once the server answers again, and an outage longer than the
budget is a ``StoreUnavailable``, never a half-written batch."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest
from psycopg import errors as pgerrors

from scroll_core import StoreUnavailable
from scroll_core.store.pg_log import PgEventLog
from scroll_core.store.pg_outage import is_transient, outage_budget_s
from scroll_core.tokens import CharRatioCounter


def _open(server, outage_s: float) -> PgEventLog:
    return PgEventLog(server.url, token_counter=CharRatioCounter(), outage_s=outage_s)


def _terminate_other_sessions(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
        # pg_terminate_backend only signals: wait until the sessions have ended.
        deadline = time.monotonic() + 10
        while admin.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()[0]:
            assert time.monotonic() < deadline, "the terminated sessions did not end"
            time.sleep(0.02)
    return len(rows)


def test_a_read_and_an_append_after_a_restart_succeed_on_the_first_try(stoppable_pg):
    # No retries allowed: the dead connections must be replaced before they are used.
    with _open(stoppable_pg, outage_s=0) as log:
        log.append(session_id="restart", kind="context_msg", content="before", dedup_key="a")
        assert log.count("restart") == 1  # this thread's reader is open now
        stoppable_pg.control.stop()
        stoppable_pg.control.start()
        assert log.count("restart") == 1
        assert [e.content for e in log.session_events("restart")] == ["before"]
        log.append(session_id="restart", kind="context_msg", content="after", dedup_key="b")
        assert log.count("restart") == 2


def test_killed_sessions_cost_no_read_or_append_an_error(stoppable_pg):
    with _open(stoppable_pg, outage_s=0) as log:
        log.append(session_id="killed", kind="context_msg", content="one")
        assert log.search("one", session_id="killed")
        assert _terminate_other_sessions(stoppable_pg.url) >= 2  # the reader and the writer
        assert [h.session_id for h in log.search("one", session_id="killed")] == ["killed"]
        log.append(session_id="killed", kind="context_msg", content="two")
        assert log.count("killed") == 2


_LEFT_OPEN: list = []  # held: a context left by garbage collection would finish its command


def _left_busy(url: str) -> psycopg.Connection:
    """A connection as a failure mid-batch leaves it: a COPY (how a large append streams its
    rows) still in progress, so the connection is ACTIVE and every later query on it fails
    ("another command is already in progress"), though its socket is fine."""
    db = psycopg.connect(url, autocommit=True)
    copy = db.cursor().copy("COPY (SELECT 1) TO STDOUT")
    copy.__enter__()
    _LEFT_OPEN.append(copy)
    assert db.info.transaction_status == psycopg.pq.TransactionStatus.ACTIVE
    return db


def test_a_writer_or_reader_left_busy_by_a_failure_is_replaced_before_it_is_used(stoppable_pg):
    # No retries allowed: the left-over connection must not be used at all.
    with _open(stoppable_pg, outage_s=0) as log:
        log.append(session_id="busy", kind="context_msg", content="before")
        assert log.count("busy") == 1  # this thread's reader is open now
        log._writer.close()
        log._writer = _left_busy(stoppable_pg.url)
        log._local.db.close()
        log._local.db = _left_busy(stoppable_pg.url)
        log.append(session_id="busy", kind="context_msg", content="after")
        assert [e.content for e in log.session_events("busy")] == ["before", "after"]


def test_reads_and_appends_wait_for_the_server_within_the_outage_budget(stoppable_pg):
    with _open(stoppable_pg, outage_s=30) as log:
        log.append(session_id="waits", kind="context_msg", content="x", dedup_key="k1")
        stoppable_pg.control.stop()
        back = threading.Timer(1.0, stoppable_pg.control.start)
        back.start()
        try:
            started = time.monotonic()
            assert log.count("waits") == 1
            assert time.monotonic() - started >= 0.5  # it did wait for the server
            seq = log.append(session_id="waits", kind="context_msg", content="y", dedup_key="k2")
            again = log.append(session_id="waits", kind="context_msg", content="y", dedup_key="k2")
        finally:
            back.join()
        assert seq == again
        assert log.count("waits") == 2


def test_an_outage_longer_than_the_budget_is_store_unavailable(stoppable_pg):
    with _open(stoppable_pg, outage_s=0.3) as log:
        log.append(session_id="gone", kind="context_msg", content="kept")
        stoppable_pg.control.stop()
        try:
            with pytest.raises(StoreUnavailable, match="did not answer"):
                log.count("gone")
            with pytest.raises(StoreUnavailable):
                log.append(session_id="gone", kind="context_msg", content="lost", dedup_key="z")
        finally:
            stoppable_pg.control.start()
        assert [e.content for e in log.session_events("gone")] == ["kept"]


@pytest.mark.parametrize(
    "error",
    [pgerrors.AdminShutdown(), pgerrors.CannotConnectNow(), pgerrors.SerializationFailure(),
     pgerrors.DeadlockDetected(), pgerrors.ReadOnlySqlTransaction(),
     pgerrors.InsufficientPrivilege(), pgerrors.DiskFull(), pgerrors.TooManyConnections(),
     pgerrors.ConnectionFailure(), psycopg.OperationalError("server closed the connection")],
)  # fmt: skip
def test_errors_of_a_database_going_away_are_transient(error):
    assert is_transient(error)


@pytest.mark.parametrize(
    "error",
    [pgerrors.UniqueViolation(), pgerrors.QueryCanceled(), pgerrors.UndefinedTable(),
     pgerrors.RaiseException(), ValueError("not a database error"),
     StoreUnavailable("commit cut off", outcome_unknown=True)],
)  # fmt: skip
def test_errors_of_the_work_itself_are_not_transient(error):
    assert not is_transient(error)


def test_the_outage_budget_comes_from_the_environment():
    assert outage_budget_s({}) == 60.0
    assert outage_budget_s({"SCROLL_DB_OUTAGE_S": "2.5"}) == 2.5
