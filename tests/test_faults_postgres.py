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
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from gateway_clients import make_key
from psycopg import errors as pgerrors

from dashboard.eventlog import reset_event_log
from dashboard.runs.worker import Worker
from scroll_core.errors import StoreUnavailable
from scroll_core.kernel import KernelConfig, KernelManager
from scroll_core.store.pg_log import PgEventLog
from scroll_core.store.pg_roles import login_statements
from tests.faults import Fault, Workload, assert_nothing_lost

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

WRITER = "scroll_fault_app"


@pytest.fixture(scope="module")
def fault_pg():
    """A PostgreSQL server of this module's own: the tests stop it and change its settings."""
    from tests import servers

    try:
        with servers.postgres(own=True) as server:
            if server.control is None:
                pytest.skip("an external PostgreSQL server cannot be restarted by the tests")
            yield server
    except servers.ServerUnavailable as exc:
        servers.unavailable("PostgreSQL", str(exc))


def _with(url: str, *, login: str | None = None, database: str | None = None) -> str:
    parts = urlsplit(url)
    if login is not None:
        parts = parts._replace(netloc=f"{login}@{parts.hostname}:{parts.port}")
    if database is not None:
        parts = parts._replace(path=f"/{database}")
    return urlunsplit(parts)


@pytest.fixture
def fault_log(request, settings, monkeypatch, fault_pg):
    """The console's Event Log in a fresh database on ``fault_pg``, migrated by its owner and
    used as the writer login; the owner's URL is returned (the checks read with it). The
    server runs again after the test, whatever it did."""
    name = f"faults_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(fault_pg.url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    owner = _with(fault_pg.url, database=name)
    PgEventLog(owner).close()
    with psycopg.connect(owner, autocommit=True) as admin:
        for statement in login_statements(writer=WRITER, reader=None):
            admin.execute(statement)
    monkeypatch.setenv("SCROLL_DB_OUTAGE_S", "1")
    settings.SCROLL_EVENTLOG_URL = _with(owner, login=WRITER)
    settings.SCROLL_EVENTLOG_READER_URL = None
    reset_event_log()
    log = request.getfixturevalue("console_log")
    assert log.backend == "postgres"
    yield owner
    fault_pg.control.start()
    reset_event_log()


@pytest.fixture
def worker():
    worker = Worker(kernels=KernelManager(KernelConfig(sandbox="process"), pool_size=0),
                    poll_s=0.05, outage_s=60).start()  # fmt: skip
    yield worker
    worker.shutdown()


@pytest.fixture
def workload(fault_log, gateway, upstream, operator, worker):
    operator.raise_request_exception = False
    key = make_key(upstream, agent="faults")
    return Workload(gateway=gateway, key=key, client=operator, upstream=upstream)


def _runs_waited(caplog) -> bool:
    """Whether a run met the fault (and waited for the database), as the worker logs it."""
    return any("waits for the database" in r.getMessage() for r in caplog.records)


def _admin(url: str):
    # An owner session that is never read-only, whatever the server's default says.
    return psycopg.connect(url, autocommit=True, options="-c default_transaction_read_only=off")


def test_postgres_stopped_for_seconds_then_started(workload, fault_log, fault_pg, caplog):
    fault = Fault(
        "postgres restart",
        begin=lambda: fault_pg.control.stop(),
        end=lambda: fault_pg.control.start(),
    )
    out = workload.run_through(fault)
    assert_nothing_lost(out, fault, fault_log)
    assert out.gateway_during and out.gateway_during[0].status_code == 503
    assert _runs_waited(caplog)


def test_insert_revoked_on_the_log_then_granted_again(workload, fault_log, caplog):
    def revoke() -> None:
        with _admin(fault_log) as db:
            db.execute("REVOKE INSERT ON events, payloads FROM scroll_writer")

    def grant() -> None:
        with _admin(fault_log) as db:
            db.execute("GRANT INSERT ON events, payloads TO scroll_writer")

    fault = Fault("REVOKE INSERT", begin=revoke, end=grant)
    out = workload.run_through(fault)
    assert_nothing_lost(out, fault, fault_log)
    assert _runs_waited(caplog)


def test_the_log_database_read_only_for_a_while(workload, fault_log, fault_pg, caplog):
    """A standby-like state: every session's transactions read-only (ALTER SYSTEM and a
    reload reach the sessions already open), then writable again."""

    def read_only(on: bool) -> None:
        with _admin(fault_pg.url) as db:
            if on:
                db.execute("ALTER SYSTEM SET default_transaction_read_only = on")
            else:
                db.execute("ALTER SYSTEM RESET default_transaction_read_only")
            db.execute("SELECT pg_reload_conf()")
        time.sleep(0.2)  # the reload reaches every backend at its next command

    fault = Fault("read-only log", begin=lambda: read_only(True), end=lambda: read_only(False))
    out = workload.run_through(fault)
    assert_nothing_lost(out, fault, fault_log)
    assert _runs_waited(caplog)


@pytest.fixture
def small_disk(fault_log):
    """The log's events on a tablespace of their own, on a 16 MB tmpfs mounted for the test
    (CI runs as root); ``fill`` and ``free`` take its space away and give it back."""
    from tests import servers

    root = Path(tempfile.mkdtemp(prefix="scroll-faults-disk-"))
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m,mode=0755", "tmpfs", str(root)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        servers.unavailable("a tmpfs for the disk-full fault", mounted.stderr.strip())
    ballast = root / "ballast"
    space = root / "tablespace"
    try:
        space.mkdir()
        shutil.chown(space, "postgres", "postgres")
        name = f"small_{uuid.uuid4().hex[:8]}"
        with _admin(fault_log) as db:
            db.execute(f"CREATE TABLESPACE {name} LOCATION '{space}'")
            db.execute(f"ALTER TABLE events SET TABLESPACE {name}")
            db.execute(f"ALTER TABLE payloads SET TABLESPACE {name}")

        def fill() -> None:
            with ballast.open("wb") as out:
                try:
                    while True:
                        out.write(b"\0" * (1 << 20))
                        out.flush()
                        os.fsync(out.fileno())
                except OSError:
                    pass  # ENOSPC: the disk is full

        yield fill, lambda: ballast.unlink(missing_ok=True)
        with _admin(fault_log) as db:
            db.execute("ALTER TABLE events SET TABLESPACE pg_default")
            db.execute("ALTER TABLE payloads SET TABLESPACE pg_default")
            db.execute(f"DROP TABLESPACE {name}")
    finally:
        ballast.unlink(missing_ok=True)
        subprocess.run(["umount", "-l", str(root)], check=False)
        shutil.rmtree(root, ignore_errors=True)


def test_the_log_disk_full_for_a_while(small_disk, workload, fault_log, caplog):
    fill, free = small_disk

    def full() -> None:
        fill()
        # The fault is real: what does not fit in a page the table has is refused.
        with PgEventLog(fault_log, outage_s=0) as log, pytest.raises(StoreUnavailable) as refused:
            log.append(session_id="ballast", kind="context_msg", content=os.urandom(1 << 16).hex())
        assert isinstance(refused.value.__cause__, pgerrors.DiskFull), refused.value

    # A small append may still fit in a page the table has; a run's turn does not.
    fault = Fault("disk full", begin=full, end=free, gateway_refused=False)
    out = workload.run_through(fault)
    assert_nothing_lost(out, fault, fault_log)
    assert _runs_waited(caplog)


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
    return _with(server, database=connection.settings_dict["NAME"])


def test_the_console_database_read_only_for_a_while(
    console_on_postgres, workload, fault_log, caplog
):
    """The console database turned read-only for new sessions and its sessions dropped (a
    standby being promoted), then writable again and its sessions dropped again."""
    from django.db import connection

    name = connection.settings_dict["NAME"]

    def read_only(on: bool) -> None:
        with _admin(_with(console_on_postgres, database="postgres")) as db:
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
        with _admin(_with(console_on_postgres, database="postgres")) as db:
            db.execute(f'ALTER DATABASE "{name}" RESET default_transaction_read_only')
    assert_nothing_lost(out, fault, fault_log)
    assert _runs_waited(caplog)


SLOW_CELL = "Run this.\n```python\nimport time\ntime.sleep(0.4)\nprint('slept')\n```"


@pytest.mark.parametrize("worker_restarted", [False, True], ids=["same-worker", "next-worker"])
def test_an_outage_past_the_budget_fails_the_run_and_marks_its_half_turn(
    fault_log, fault_pg, worker_restarted
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
        fault_pg.control.stop()
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
            fault_pg.control.start()
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
