"""The fault suite, PostgreSQL side (issue 30): one fault at a time while runs, gateway
requests and pages are in flight, against a real PostgreSQL on loopback that the tests stop,
restart, revoke grants on, make read-only and fill up. The Event Log is reached as the
writer login a deployment uses (``manage.py scroll_eventlog roles``), so a REVOKE bites.

Each test asserts what ``tests/faults.assert_nothing_lost`` says: every run started before
or during the fault finishes done after it, no event twice, ``session_stats`` equal to the
rows, only provider-shaped 503s from the gateway during the fault and 200s after, no page
answered 500. Timings are shortened (``SCROLL_DB_OUTAGE_S=1`` for the log's own retries,
faults of a few seconds) so each test takes seconds. A killed worker is covered with real
processes by ``tests/test_scaled_system.py``.
"""

from __future__ import annotations

import os
import time

import pytest
from psycopg import errors as pgerrors

from dashboard.runs.worker import Worker
from scroll_core.errors import StoreUnavailable
from scroll_core.kernel import KernelConfig, KernelManager
from scroll_core.store.pg_log import PgEventLog
from tests import faults
from tests.faults import Fault, admin, assert_nothing_lost, runs_waited, with_url

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_postgres_stopped_for_seconds_then_started(workload, fault_log, stoppable_pg, caplog):
    fault = Fault(
        "postgres restart",
        begin=lambda: stoppable_pg.control.stop(),
        end=lambda: stoppable_pg.control.start(),
    )
    out = workload.run_through(fault)
    assert_nothing_lost(out, fault, fault_log)
    assert out.gateway_during and out.gateway_during[0].status_code == 503
    assert runs_waited(caplog.records)


def test_insert_revoked_on_the_log_then_granted_again(workload, fault_log, caplog):
    def revoke() -> None:
        with admin(fault_log) as db:
            db.execute("REVOKE INSERT ON events, payloads FROM scroll_writer")

    def grant() -> None:
        with admin(fault_log) as db:
            db.execute("GRANT INSERT ON events, payloads TO scroll_writer")

    fault = Fault("REVOKE INSERT", begin=revoke, end=grant)
    out = workload.run_through(fault)
    assert_nothing_lost(out, fault, fault_log)
    assert runs_waited(caplog.records)


def test_the_log_database_read_only_for_a_while(workload, fault_log, stoppable_pg, caplog):
    """A standby-like state: every session's transactions read-only (ALTER SYSTEM and a
    reload reach the sessions already open), then writable again."""

    def read_only(on: bool) -> None:
        with admin(stoppable_pg.url) as db:
            if on:
                db.execute("ALTER SYSTEM SET default_transaction_read_only = on")
            else:
                db.execute("ALTER SYSTEM RESET default_transaction_read_only")
            db.execute("SELECT pg_reload_conf()")
        time.sleep(0.2)  # the reload reaches every backend at its next command

    fault = Fault("read-only log", begin=lambda: read_only(True), end=lambda: read_only(False))
    out = workload.run_through(fault)
    assert_nothing_lost(out, fault, fault_log)
    assert runs_waited(caplog.records)


@pytest.fixture
def small_disk(fault_log):
    """The log's events on a 16 MB tmpfs of their own (``tests/faults.small_disk``)."""
    from tests import servers

    try:
        with faults.small_disk(fault_log) as disk:
            yield disk
    except faults.DiskUnavailable as exc:
        servers.unavailable("a tmpfs for the disk-full fault", str(exc))


def test_the_log_disk_full_for_a_while(small_disk, workload, fault_log, caplog):
    def full() -> None:
        small_disk.fill()
        # The fault is real: what does not fit in a page the table has is refused.
        with PgEventLog(fault_log, outage_s=0) as log, pytest.raises(StoreUnavailable) as refused:
            log.append(session_id="ballast", kind="context_msg", content=os.urandom(1 << 16).hex())
        assert isinstance(refused.value.__cause__, pgerrors.DiskFull), refused.value

    # A small append may still fit in a page the table has; a run's turn does not.
    fault = Fault("disk full", begin=full, end=small_disk.free, gateway_refused=False)
    out = workload.run_through(fault)
    assert_nothing_lost(out, fault, fault_log)
    assert runs_waited(caplog.records)


@pytest.fixture
def console_on_postgres(fault_log):
    """The console database's URL as its owner; only in the PostgreSQL pass."""
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip(
            "the console database is SQLite in this pass; the PostgreSQL pass "
            "(make test-scaled) runs this fault"
        )
    server = os.environ.get("SCROLL_TEST_POSTGRES_URL") or os.environ["SCROLL_DATABASE_URL"]
    return with_url(server, database=connection.settings_dict["NAME"])


def test_the_console_database_read_only_for_a_while(
    console_on_postgres, workload, fault_log, caplog
):
    """The console database turned read-only for new sessions and its sessions dropped (a
    standby being promoted), then writable again and its sessions dropped again."""
    from django.db import connection

    name = connection.settings_dict["NAME"]

    def read_only(on: bool) -> None:
        with admin(with_url(console_on_postgres, database="postgres")) as db:
            value = "on" if on else "off"
            db.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = {value}')
            db.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> pg_backend_pid()",
                (name,),
            )
        connection.close()  # the test's own connection was one of them

    fault = Fault(
        "console read-only",
        begin=lambda: read_only(True),
        end=lambda: read_only(False),
        gateway_refused=False,
        queue_during=False,
    )
    try:
        out = workload.run_through(fault)
    finally:
        with admin(with_url(console_on_postgres, database="postgres")) as db:
            db.execute(f'ALTER DATABASE "{name}" RESET default_transaction_read_only')
    assert_nothing_lost(out, fault, fault_log)
    assert runs_waited(caplog.records)


SLOW_CELL = "Run this.\n```python\nimport time\ntime.sleep(0.4)\nprint('slept')\n```"


@pytest.mark.parametrize("worker_restarted", [False, True], ids=["same-worker", "next-worker"])
def test_an_outage_past_the_budget_fails_the_run_and_marks_its_half_turn(
    fault_log, stoppable_pg, worker_restarted
):
    """A run whose database stays away longer than its budget fails with the reason, and
    the turn it was in is marked interrupted in the log (with the seqs it left) once the
    log answers again, by its worker or, if that one stopped meanwhile, by the next worker
    to start: never a half turn left as if it were whole."""
    from dashboard.eventlog import get_event_log
    from dashboard.runs import runner
    from dashboard.runs.models import RunRecord
    from scroll_core.agent.interrupted import INTERRUPTED_KEY, left_by_open_turn
    from tests.faults import wait_for

    short = Worker(kernels=KernelManager(KernelConfig(sandbox="process"), pool_size=0),
                   poll_s=0.05, outage_s=1.0).start()  # fmt: skip
    try:
        run = runner.start_run("\n---\n".join([SLOW_CELL] * 6), pause_s=0)

        def in_second_turn() -> bool:
            # Its call is logged and its cell (0.4 s) runs: the fault comes mid-turn.
            events = get_event_log().session_events(run.session_id, limit=None)
            return any((e.dedup_key or "").endswith(":t2:s1:call0") for e in events)

        wait_for(in_second_turn, 60, "the second turn's call")
        stoppable_pg.control.stop()
        try:
            run = wait_for(
                lambda: RunRecord.objects.filter(pk=run.pk, status=RunRecord.FAILED).first(),
                60,
                "the run to fail",
            )
            if worker_restarted:
                short.shutdown()  # before the log is back: its pending mark goes with it
                short = Worker(kernels=KernelManager(KernelConfig(sandbox="process"),
                                                     pool_size=0), poll_s=0.05)  # fmt: skip
        finally:
            stoppable_pg.control.start()
        if worker_restarted:
            short.start()
        assert "did not answer" in run.error

        def marked() -> list:
            events = left_by_open_turn(get_event_log(), run.checkpoint["session"])
            return [e for e in events if INTERRUPTED_KEY in e.metadata and e.role == "system"]

        marker = wait_for(marked, 30, "the open turn's mark")[0]
        events = left_by_open_turn(get_event_log(), run.checkpoint["session"])
        left = [e for e in events if INTERRUPTED_KEY not in e.metadata]
        assert [e.dedup_key.split(":", 1)[1] for e in left] == ["t2:user", "t2:s1:assistant",
                                                                 "t2:s1:call0"]  # fmt: skip
        assert marker.metadata[INTERRUPTED_KEY]["seqs"] == [e.seq for e in left]
        assert marker.metadata[INTERRUPTED_KEY]["turn"] == run.turns + 1 == 2
        # The call the fault cut off has its result: "not run", never a dangling call.
        closing = [e for e in events if e.kind == "tool_result"]
        assert [e.tool_call_id for e in closing] == [left[-1].tool_call_id]
    finally:
        short.shutdown()
