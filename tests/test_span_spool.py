"""Spans are not lost while the console database is away (issue 30): the span sink spools
them on disk, bounded in bytes, and stores them when the database is back. The console runs
in a process of its own (tests/console_child.py) whose database is a PostgreSQL server
this module stops and starts."""

from __future__ import annotations

import json
import uuid

import psycopg
import pytest
from console_process import ConsoleProcess

from dashboard.telemetry.spool import SpanSpool


@pytest.fixture
def console(stoppable_pg, tmp_path):
    """Start a console on a fresh database of ``stoppable_pg``: ``console(spool_bytes)``."""
    name = f"spool_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(stoppable_pg.url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    started: list[ConsoleProcess] = []

    def start(spool_bytes: int = 64 * 1024 * 1024) -> ConsoleProcess:
        url = stoppable_pg.url.rsplit("/", 1)[0] + f"/{name}"
        child = ConsoleProcess(url, tmp_path, SCROLL_SPAN_SPOOL_BYTES=str(spool_bytes))
        started.append(child)
        return child

    yield start
    stoppable_pg.control.start()
    for child in started:
        child.close()


def test_spans_that_end_while_the_database_is_away_are_stored_when_it_returns(
    console, stoppable_pg
):
    child = console()
    assert child.ask("spans 5 1")["stored"] == 5

    stoppable_pg.control.stop()
    during = child.ask("spans 4 3")  # 12 spans end during the outage
    assert during["spooled"] == 12 and during["spool_pending"] == 12
    assert during["stored"] == 5 and during["errors"] == 0

    stoppable_pg.control.start()
    after = child.ask("stored 20")
    assert after["rows"] == 17 and after["spool_pending"] == 0
    assert (after["unspooled"], after["spool_dropped"], after["errors"]) == (12, 0, 0)
    log = child.close()
    assert log.count("console database unreachable") == 1, log
    assert "console database back after" in log
    assert "Traceback" not in log


def test_spans_a_stopped_process_left_in_the_spool_are_stored_by_the_next(console, stoppable_pg):
    first = console()
    stoppable_pg.control.stop()
    assert first.ask("spans 3 2")["spool_pending"] == 6
    first.close()  # stopped before the database came back

    stoppable_pg.control.start()
    after = console().ask("stored 20")  # the same data folder and database
    assert (after["rows"], after["unspooled"], after["spool_pending"]) == (6, 6, 0)


def test_an_overflowing_spool_drops_its_oldest_spans_and_counts_them(console, stoppable_pg):
    # Room for about two batches of three spans: the oldest of five batches go.
    batch = len(json.dumps([_a_span_dict()] * 3, separators=(",", ":")))
    child = console(spool_bytes=int(batch * 2.5))
    stoppable_pg.control.stop()
    during = child.ask("spans 3 5")
    assert during["spooled"] == 15
    dropped = during["spool_dropped"]
    assert dropped > 0 and dropped % 3 == 0
    assert during["spool_pending"] == 15 - dropped

    stoppable_pg.control.start()
    after = child.ask("stored 20")
    assert after["rows"] == 15 - dropped and after["unspooled"] == 15 - dropped
    log = child.close()
    assert f"dropped the oldest 3 spans ({dropped} since start)" in log, log


def _a_span_dict() -> dict:
    """A span as the child's sink spools one (``scroll.search`` in session ``s-spool``)."""
    return {
        "trace_id": "0" * 32, "span_id": "0" * 16, "parent_id": None, "name": "scroll.search",
        "start_ns": 1_700_000_000_000_000_000, "end_ns": 1_700_000_000_000_100_000,
        "duration_ms": 0.1, "status": "unset", "status_message": None,
        "attributes": {"gen_ai.conversation.id": "s-spool"}, "session_id": "s-spool",
        "kind": "internal", "events": [],
    }  # fmt: skip


def test_the_spool_keeps_batches_in_order_and_under_its_bytes(tmp_path):
    spool = SpanSpool(tmp_path / "spool", max_bytes=200)
    for n in range(1, 6):
        spool.put([{"n": n, "pad": "x" * 40}])
    kept = [spool.read(path)[0]["n"] for path in spool.files()]  # type: ignore[index]
    assert kept == sorted(kept) and kept[-1] == 5
    assert sum(p.stat().st_size for p in spool.files()) <= 200
    assert spool.dropped == 5 - len(kept) > 0
    with pytest.raises(ValueError, match="at least 1 byte"):
        SpanSpool(tmp_path / "other", max_bytes=0)
