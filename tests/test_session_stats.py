"""The per-session summary table (sqlite_schema m002): kept by the append path, refused to
everyone else, and always equal to a GROUP BY over the events."""

from __future__ import annotations

import itertools
import signal
import sqlite3
import subprocess
import sys
import textwrap
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scroll_core import EventLog, InvalidEvent
from scroll_core.store.sqlite_schema import _DEDUP_TAKEN, m001_initial
from tests.backends import outside_connection
from tests.conftest import REPO

GROUP_BY = (
    "SELECT session_id, min(agent_id), count(*), sum(tokens), min(seq), max(seq), "
    "min(created_at), max(created_at) FROM events GROUP BY session_id ORDER BY session_id"
)
STATS = (
    "SELECT session_id, agent_id, events, tokens, first_seq, last_seq, first_at, last_at "
    "FROM session_stats ORDER BY session_id"
)


def _both(log: Any) -> tuple[list[tuple], list[tuple]]:
    """A GROUP BY over the events and the summary table, read outside the log's own
    connection, on either backend."""
    with outside_connection(log) as db:
        return (
            [tuple(r) for r in db.execute(GROUP_BY).fetchall()],
            [tuple(r) for r in db.execute(STATS).fetchall()],
        )


def _tamper(log: Any, sql: str, params: tuple = ()) -> None:
    with outside_connection(log) as db:
        db.execute(sql, params)


POISON_PG = """
CREATE FUNCTION test_poison() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF new.content = 'poison' THEN RAISE EXCEPTION 'poisoned'; END IF;
    RETURN new;
END $$;
CREATE TRIGGER test_poison BEFORE INSERT ON events FOR EACH ROW EXECUTE FUNCTION test_poison();
"""


def _poison(log: Any) -> None:
    """Make the database itself refuse any event whose content is 'poison' (a fault inside
    the appending transaction, after the rows before it have fired their triggers)."""
    if log.backend == "sqlite":
        _tamper(
            log,
            "CREATE TRIGGER test_poison BEFORE INSERT ON events WHEN new.content = 'poison' "
            "BEGIN SELECT RAISE(ABORT, 'poisoned'); END",
        )
    else:
        _tamper(log, POISON_PG)


@pytest.fixture
def log(store):
    """The summary is kept on both backends: tests taking ``log`` run on each."""
    return store


@pytest.fixture
def sqlite_log(tmp_path):
    """A SQLite log, for the refusals written in SQLite's own SQL and words; PostgreSQL's
    are in tests/test_eventlog_postgres.py (the summary and events refused to its owner)."""
    with EventLog(tmp_path / "eventlog.sqlite3") as event_log:
        yield event_log


def _seeded(log: EventLog) -> None:
    log.append(session_id="a", kind="context_msg", content="one two", created_at="2024-01-02")
    log.append(session_id="b", agent_id="bot", kind="context_msg", content="three")
    log.append(session_id="a", kind="context_msg", content="four", created_at="2024-01-01")


def test_sessions_read_the_summary_kept_on_append(log):
    _seeded(log)
    by_id = {s.session_id: s for s in log.sessions()}
    assert by_id["a"].events == 2 and by_id["a"].first_seq == 1 and by_id["a"].last_seq == 3
    assert by_id["a"].first_at.startswith("2024-01-01")
    assert by_id["a"].last_at.startswith("2024-01-02")
    assert by_id["b"].agent_id == "bot" and by_id["b"].events == 1
    assert log.session("a") == by_id["a"]
    assert log.session("nope") is None
    assert log.count("a") == 2 and log.count("nope") == 0 and log.count() == 3
    group_by, stats = _both(log)
    assert stats == group_by


def test_sessions_come_most_recent_first_and_can_be_cut(log):
    _seeded(log)
    log.append(session_id="c", kind="context_msg", content="five")
    assert [s.session_id for s in log.sessions()] == ["c", "a", "b"]
    assert [s.session_id for s in log.sessions(limit=2)] == ["c", "a"]
    assert [s.session_id for s in log.sessions(after_seq=2)] == ["c", "a"]
    assert log.sessions(after_seq=4) == []
    assert log.sessions(limit=-5) == []


def test_a_batch_the_database_refuses_midway_leaves_the_summary_as_it_was(log):
    _seeded(log)
    _poison(log)
    before = log.sessions()
    batch = [{"session_id": s, "kind": "k", "content": "x"} for s in ("a", "new") * 60]
    with pytest.raises(InvalidEvent, match="poisoned"):
        log.append_many([*batch, {"session_id": "a", "kind": "k", "content": "poison"}])
    assert log.sessions() == before
    assert log.session("new") is None


def test_a_repeated_dedup_key_is_not_counted_twice(log):
    log.append(session_id="s", kind="context_msg", content="x", dedup_key="k")
    log.append_many(
        [
            {"session_id": "s", "kind": "context_msg", "content": "x", "dedup_key": "k"},
            {"session_id": "s", "kind": "context_msg", "content": "y", "dedup_key": "j"},
            {"session_id": "s", "kind": "context_msg", "content": "y", "dedup_key": "j"},
        ]
    )
    summary = log.session("s")
    assert summary is not None and summary.events == 2 and summary.last_seq == 2


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE session_stats SET events = events + 1",
        "UPDATE session_stats SET tokens = 0 WHERE session_id = 'a'",
        "UPDATE session_stats SET agent_id = 'other' WHERE session_id = 'b'",
        # Looks like what the trigger does for the newest event, but it is already counted.
        "UPDATE session_stats SET events = events + 1, last_seq = 3, "
        "tokens = tokens + (SELECT tokens FROM events WHERE seq = 3) WHERE session_id = 'a'",
        "UPDATE session_stats SET session_id = 'z' WHERE session_id = 'b'",
        "DELETE FROM session_stats",
        "DELETE FROM session_stats WHERE session_id = 'b'",
        "INSERT INTO session_stats VALUES ('ghost', 'main', 1, 1, 3, 3, 'x', 'x')",
        # A copy of the newest event's own figures: REPLACE would reset session a to 1 event.
        "INSERT OR REPLACE INTO session_stats SELECT session_id, agent_id, 1, tokens, seq, seq, "
        "created_at, created_at FROM events WHERE seq = 3",
        "INSERT INTO session_stats SELECT session_id, agent_id, 1, tokens, seq, seq, "
        "created_at, created_at FROM events WHERE seq = 3 "
        "ON CONFLICT(session_id) DO UPDATE SET events = 1",
    ],
)
def test_it_refuses_any_write_to_the_summary_from_outside_the_append_path(sqlite_log, sql):
    log = sqlite_log
    _seeded(log)
    before = _both(log)
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        _tamper(log, sql)
    assert _both(log) == before
    # The log still appends and still counts after the refusal.
    log.append(session_id="a", kind="context_msg", content="after")
    group_by, stats = _both(log)
    assert stats == group_by and log.count("a") == 3


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        (
            "INSERT OR REPLACE INTO events (seq, session_id, kind, content, created_at, tokens) "
            "VALUES (1, 'a', 'context_msg', 'forged', '2024-01-01', 1)",
            "append-only",
        ),
        (
            "INSERT INTO events (seq, session_id, kind, content, created_at, tokens) "
            "VALUES (-7, 'a', 'context_msg', 'back-dated', '2024-01-01', 1)",
            "append-only",
        ),
        (
            "INSERT OR REPLACE INTO events (session_id, kind, content, created_at, tokens, "
            "dedup_key) VALUES ('a', 'context_msg', 'forged', '2024-01-01', 1, 'k')",
            "UNIQUE constraint failed",
        ),
    ],
)
def test_it_refuses_an_insert_that_would_replace_an_event(sqlite_log, sql, message):
    log = sqlite_log
    log.append(session_id="a", kind="context_msg", content="original", dedup_key="k")
    log.append(session_id="b", kind="context_msg", content="second")
    with pytest.raises(sqlite3.IntegrityError, match=message):
        _tamper(log, sql)
    assert [e.content for e in log.range(-10, 10)] == ["original", "second"]
    group_by, stats = _both(log)
    assert stats == group_by


def test_the_dedup_refusal_keeps_sqlites_own_words():
    # eventlog's fast path recognises a taken key by this text.
    assert _DEDUP_TAKEN.startswith("UNIQUE constraint failed: events.session_id, events.dedup_key")


def test_the_migration_backfills_a_log_written_before_it(tmp_path):
    """SQLite only: sqlite_schema m002 backfills SQLite logs written before the summary existed;
    PostgreSQL logs have had it since their first migration."""
    path = tmp_path / "old.sqlite3"
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("CREATE TABLE _scroll_migrations (name TEXT PRIMARY KEY, applied_at TEXT)")
    m001_initial(db)
    db.execute("INSERT INTO _scroll_migrations(name, applied_at) VALUES ('m001_initial', 'x')")
    rows = [
        ("s1", "main", "2024-01-03", 5),
        ("s2", "zed", "2024-01-01", 7),
        ("s1", "main", "2024-01-02", 11),
        ("s2", "amy", "2024-01-04", 13),
    ]
    db.executemany(
        "INSERT INTO events (session_id, agent_id, kind, content, created_at, tokens) "
        "VALUES (?, ?, 'context_msg', 'x', ?, ?)",
        rows,
    )
    db.close()
    with EventLog(path) as log:
        group_by, stats = _both(log)
        assert stats == group_by and len(stats) == 2
        assert log.session("s2") is not None and log.session("s2").agent_id == "amy"
        assert log.session("s1").tokens == 16
        log.append(session_id="s1", kind="context_msg", content="new", created_at="2024-01-05")
        assert log.session("s1").events == 3 and log.session("s1").last_seq == 5
        group_by, stats = _both(log)
        assert stats == group_by


_WRITER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {repo!r})
    from scroll_core import EventLog, CharRatioCounter
    log = EventLog({path!r}, token_counter=CharRatioCounter())
    i = 0
    while True:
        log.append_many(
            [dict(session_id=f"w{{(i + j) % 7}}", kind="k", content=f"row {{i}} {{j}}")
             for j in range(20)]
        )
        print(i, flush=True)
        i += 1
    """
)


def test_a_writer_killed_mid_batch_leaves_the_summary_equal_to_the_events(tmp_path):
    """SQLite's writer killed mid-batch; PostgreSQL's is killed holding the seq lock in
    tests/test_eventlog_postgres.py, which checks the same summary equality after."""
    path = tmp_path / "log.sqlite3"
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITER.format(repo=str(REPO), path=str(path))],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    for _ in range(50):  # fifty batches reported committed, then kill it wherever it is
        assert proc.stdout.readline(), "writer exited early"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    proc.stdout.close()
    with EventLog(path) as log:
        assert log.count() >= 50 * 20
        assert log.count() % 20 == 0  # whole batches only
        group_by, stats = _both(log)
    assert stats == group_by


_event = st.fixed_dictionaries(
    {
        "session_id": st.sampled_from(["s1", "s2", "s3"]),
        "agent_id": st.sampled_from(["main", "alt", "bot"]),
        "kind": st.just("context_msg"),
        "content": st.text(alphabet="abc xyz", max_size=20),
        "created_at": st.sampled_from(
            ["2024-01-01", "2024-03-01T10:00:00Z", "2023-12-31T23:00:00Z", "2024-02-02"]
        ),
    },
    optional={"dedup_key": st.sampled_from(["k1", "k2", "k3"])},
)
_batch = st.tuples(st.lists(_event, min_size=1, max_size=6), st.booleans())


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(st.lists(_batch, max_size=8))
def test_the_summary_always_equals_a_group_by_over_the_events(poisoned_log, batches):
    # The examples share one log (a fresh database per example cost most of this test's
    # time on PostgreSQL), each writing sessions, agents and dedup keys of its own: the
    # summary must equal the GROUP BY over every example's events so far, and a replayed
    # example (Hypothesis' shrinking) writes the same events under a fresh tag.
    log = poisoned_log
    tag = f"x{next(_EXAMPLES)}-"
    for events, spoil in batches:
        events = [_tagged(event, tag) for event in events]
        # A spoiled batch ends in an event the database refuses: no trace of it.
        poison = {"session_id": f"{tag}s2", "kind": "context_msg", "content": "poison"}
        batch = [*events, poison] if spoil else events
        if spoil:
            with pytest.raises(InvalidEvent):
                log.append_many(batch)
        else:
            log.append_many(batch)
        group_by, stats = _both(log)
        assert stats == group_by
    assert log.count() == sum(s.events for s in log.sessions())


# Numbers the examples of the property test above, which share one log.
_EXAMPLES = itertools.count()


def _tagged(event: dict[str, Any], tag: str) -> dict[str, Any]:
    tagged = {**event, "session_id": tag + event["session_id"], "agent_id": tag + event["agent_id"]}
    if "dedup_key" in event:
        tagged["dedup_key"] = tag + event["dedup_key"]
    return tagged


@pytest.fixture
def poisoned_log(log):
    """``log`` refusing any event whose content is 'poison' (``_poison``)."""
    _poison(log)
    return log
