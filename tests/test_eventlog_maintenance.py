"""FTS maintenance (check, rebuild, optimize) and the search time limit of the Event Log."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from scroll_core import EventLog, SearchIndexCorrupt, SearchTimeout
from tests.backends import outside_connection
from tests.conftest import open_store


def _fill(log: EventLog, n: int = 200) -> None:
    log.append_many(
        {
            "session_id": f"s{i % 3}",
            "kind": "context_msg",
            "content": f"deploy {i} of the billing service went {'fine' if i % 2 else 'bad'}",
            "headline": "deploy" if i % 5 == 0 else None,
            "name": "ops",
        }
        for i in range(n)
    )
    log.append(session_id="s0", kind="tool_result", content="recall cell billing", searchable=False)


def _dump(log: Any) -> tuple[list[tuple], list[tuple]]:
    """The events and the session summary, read outside the log's own connection."""
    with outside_connection(log) as db:
        return (
            [tuple(r) for r in db.execute("SELECT * FROM events ORDER BY seq").fetchall()],
            [
                tuple(r)
                for r in db.execute("SELECT * FROM session_stats ORDER BY session_id").fetchall()
            ],
        )


@pytest.fixture
def log(store):
    """The check, optimize and time-limit contract holds on both backends."""
    return store


@pytest.fixture
def sqlite_log(request, tmp_path):
    """SQLite only: FTS5's shadow tables damaged by hand and its VM step limit. PostgreSQL's
    index is written only by the append trigger and refuses edits (tests/test_eventlog_postgres.py),
    and its bound on a search is statement_timeout alone."""
    with open_store(request, "sqlite", tmp_path) as event_log:
        yield event_log


def _corrupt(path: Path, sql: str) -> None:
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute(sql)
    finally:
        db.close()


def test_a_sound_index_passes_the_check_and_counts_the_searchable_events(log):
    _fill(log)
    assert log.fts_check() == 200


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("DELETE FROM events_fts_docsize WHERE id IN (3, 4)", "2 searchable event.* missing"),
        (
            "INSERT INTO events_fts(rowid, content, headline, name) "
            "VALUES (201, 'recall cell billing', '', '')",
            "1 entry.* for no searchable event, first 201",
        ),
        ("UPDATE events_fts_data SET block = zeroblob(length(block)) WHERE id > 10", "integrity"),
        ("DELETE FROM events_fts_data WHERE id > 10", "integrity"),
    ],
)
def test_a_damaged_index_fails_the_check_and_rebuild_mends_it_without_touching_events(
    sqlite_log, damage, message
):
    log = sqlite_log
    _fill(log)
    before = _dump(log)
    _corrupt(log.path, damage)
    with pytest.raises(SearchIndexCorrupt, match=message):
        log.fts_check()
    assert log.fts_rebuild() == 200
    assert log.fts_check() == 200
    assert _dump(log) == before
    hits = log.search("billing", k=500)
    assert len(hits) == 200
    assert 201 not in {h.seq for h in hits}  # the unsearchable cell stays out


def test_optimize_keeps_every_result(log):
    _fill(log)
    log.append(session_id="s9", kind="context_msg", content="late billing note")
    before = [(h.seq, round(h.score, 6)) for h in log.search("billing note", k=20)]
    events = _dump(log)
    log.fts_optimize()
    assert [(h.seq, round(h.score, 6)) for h in log.search("billing note", k=20)] == before
    assert log.fts_check() == 201
    assert _dump(log) == events


def test_a_search_past_its_step_limit_is_stopped_with_a_clear_error(sqlite_log):
    log = sqlite_log
    _fill(log)
    with pytest.raises(SearchTimeout, match="stopped after 1 SQLite steps; narrow the query"):
        log.search("billing deploy", k=50, step_limit=1)
    # The reader is left usable and unlimited afterwards.
    assert len(log.search("billing deploy", k=50)) == 50


def test_a_zero_time_limit_stops_a_search(log):
    _fill(log)
    with pytest.raises(SearchTimeout, match="after 0 s"):
        log.search("billing deploy", k=50, time_limit_s=0)


def test_a_search_within_its_limits_returns_its_hits(log):
    _fill(log)
    unlimited = log.search("fine", k=10)
    assert log.search("fine", k=10, time_limit_s=60, step_limit=10**9) == unlimited
