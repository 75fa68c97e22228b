from __future__ import annotations

import sqlite3

import pytest

from scroll_core import (
    AppendOnlyViolation,
    EventLog,
    EventLogError,
    EventNotFound,
    InvalidEvent,
    ScrollError,
)
from scroll_core.store.sqlite_schema import MIGRATIONS
from tests.backends import DB_ERRORS, mark, outside_connection


@pytest.fixture
def log(store):
    """Every test here that takes ``log`` runs on SQLite and on PostgreSQL."""
    return store


def test_it_returns_increasing_seqs(log):
    seqs = [log.append(session_id="s1", kind="context_msg", content=f"m{i}") for i in range(5)]
    assert seqs == sorted(seqs)
    assert len(set(seqs)) == 5
    assert [e.content for e in log.range(seqs[0], seqs[-1])] == [f"m{i}" for i in range(5)]


def test_it_round_trips_every_field(log):
    seq = log.append(
        session_id="s1",
        kind="tool_result",
        content="42 rows",
        role="tool",
        agent_id="researcher",
        name="sql",
        tool_call_id="call_1",
        tool_input={"query": "select 1", "n": [1, 2]},
        headline="count rows | status: done",
        metadata={"source": "test", "nested": {"a": 1}},
        created_at="2024-02-29T23:59:59+02:00",
        dedup_key="k1",
    )
    event = log.get(seq)
    assert event.session_id == "s1"
    assert event.agent_id == "researcher"
    assert event.kind == "tool_result"
    assert event.role == "tool"
    assert event.name == "sql"
    assert event.tool_call_id == "call_1"
    assert event.tool_input == {"query": "select 1", "n": [1, 2]}
    assert event.headline == "count rows | status: done"
    assert event.metadata == {"source": "test", "nested": {"a": 1}}
    assert event.created_at == "2024-02-29T21:59:59.000000Z"
    assert event.tokens > 0
    assert event.payload is None


def test_it_counts_tokens_once_at_append(log):
    seq = log.append(session_id="s", kind="context_msg", content="hello world")
    assert log.get(seq).tokens == log.tokens.count("hello world") == 2


def test_a_repeated_dedup_key_returns_the_existing_seq_and_writes_nothing(log):
    first = log.append(session_id="s", kind="context_msg", content="a", dedup_key="x")
    again = log.append(session_id="s", kind="context_msg", content="different", dedup_key="x")
    assert again == first
    assert log.count() == 1
    assert log.get(first).content == "a"
    # The key is unique per session, not globally.
    other = log.append(session_id="t", kind="context_msg", content="a", dedup_key="x")
    assert other != first


def test_append_many_resolves_duplicates_inside_the_batch(log):
    seqs = log.append_many(
        [
            {"session_id": "s", "kind": "context_msg", "content": "a", "dedup_key": "1"},
            {"session_id": "s", "kind": "context_msg", "content": "b", "dedup_key": "1"},
            {"session_id": "s", "kind": "context_msg", "content": "c"},
        ]
    )
    assert seqs[0] == seqs[1]
    assert seqs[2] == seqs[0] + 1
    assert log.count() == 2


def test_append_many_is_all_or_nothing(log):
    log.append(session_id="s", kind="context_msg", content="before")
    with pytest.raises(InvalidEvent, match="event 1: invalid created_at"):
        log.append_many(
            [
                {"session_id": "s", "kind": "context_msg", "content": "ok"},
                {
                    "session_id": "s",
                    "kind": "context_msg",
                    "content": "bad",
                    "created_at": "yesterday",
                },
            ]
        )
    assert log.count() == 1


@pytest.mark.parametrize(
    ("event", "message"),
    [
        ({"kind": "context_msg", "content": "x"}, "session_id must be a non-empty string"),
        ({"session_id": "", "kind": "context_msg", "content": "x"}, "session_id"),
        ({"session_id": "s", "content": "x"}, "kind must be a non-empty string"),
        ({"session_id": "s", "kind": "context_msg"}, "content is required"),
        ({"session_id": "s", "kind": "context_msg", "content": 5}, "content must be str or bytes"),
        ({"session_id": "s", "kind": "k", "content": "x", "role": 3}, "role must be a string"),
        (
            {"session_id": "s", "kind": "k", "content": "x", "metadata": [1]},
            "metadata must be a mapping",
        ),
        ({"session_id": "s", "kind": "k", "content": "x", "metadata": {"a": object()}}, "not JSON"),
        ({"session_id": "s", "kind": "k", "content": "x", "tool_input": {1, 2}}, "not JSON"),
        (
            {"session_id": "s", "kind": "k", "content": "x", "created_at": "2024-13-01"},
            "created_at",
        ),
        ({"session_id": "s", "kind": "k", "content": "x", "colour": "red"}, "unknown field"),
    ],
)
def test_it_rejects_invalid_events_with_a_clear_message(log, event, message):
    with pytest.raises(InvalidEvent, match=message):
        log.append_many([event])
    assert log.count() == 0


def test_get_of_a_missing_seq_raises_event_not_found(log):
    with pytest.raises(EventNotFound, match="no event with seq 99"):
        log.get(99)


def test_it_refuses_update_of_an_event_through_any_connection(log):
    seq = log.append(session_id="s", kind="context_msg", content="original")
    with outside_connection(log) as other, pytest.raises(DB_ERRORS, match="append-only"):
        other.execute(f"UPDATE events SET content = 'rewritten' WHERE seq = {mark(log)}", (seq,))
    assert log.get(seq).content == "original"


def test_it_refuses_delete_of_an_event_through_any_connection(log):
    seq = log.append(session_id="s", kind="context_msg", content="keep me")
    with outside_connection(log) as other, pytest.raises(DB_ERRORS, match="append-only"):
        other.execute("DELETE FROM events")
    assert log.get(seq).content == "keep me"


def test_a_write_that_would_rewrite_an_event_is_refused_as_a_scroll_error(log):
    kept = log.append(session_id="s", kind="context_msg", content="original")
    # Another writer's trigger turns every insert into an insert plus an UPDATE of the row;
    # the log's own append-only trigger must refuse the batch as a whole.
    with outside_connection(log) as other:
        if log.backend == "sqlite":
            other.execute(
                "CREATE TRIGGER rewrite_after_insert AFTER INSERT ON events BEGIN "
                "UPDATE events SET content = 'rewritten' WHERE seq = NEW.seq; END"
            )
        else:
            other.execute(
                "CREATE FUNCTION rewrite() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                "UPDATE events SET content = 'rewritten' WHERE seq = NEW.seq; RETURN NULL; "
                "END $$; CREATE TRIGGER rewrite_after_insert AFTER INSERT ON events "
                "FOR EACH ROW EXECUTE FUNCTION rewrite()"
            )
        other.commit()

    with pytest.raises(ScrollError) as caught:
        log.append_many(
            [
                {"session_id": "s", "kind": "context_msg", "content": "one"},
                {"session_id": "s", "kind": "context_msg", "content": "two"},
            ]
        )

    assert isinstance(caught.value, AppendOnlyViolation)
    assert "append-only" in str(caught.value)
    assert log.count() == 1 and log.get(kept).content == "original"


def test_readers_cannot_write(tmp_path):
    log = EventLog(tmp_path / "log.sqlite3")
    log.append(session_id="s", kind="context_msg", content="x")
    with pytest.raises(sqlite3.OperationalError, match=r"readonly|query_only|attempt to write"):
        log._reader().execute("INSERT INTO events_fts(rowid, content) VALUES (99, 'x')")
    log.close()


def test_session_events_pages_after_a_seq(log):
    seqs = [log.append(session_id="a", kind="context_msg", content=str(i)) for i in range(7)]
    log.append(session_id="b", kind="context_msg", content="other")
    page1 = log.session_events("a", limit=3)
    page2 = log.session_events("a", after_seq=page1[-1].seq, limit=3)
    assert [e.seq for e in page1] == seqs[:3]
    assert [e.seq for e in page2] == seqs[3:6]
    assert all(e.session_id == "a" for e in page1 + page2)


def test_sessions_summarise_counts_tokens_and_bounds(log):
    log.append(session_id="a", kind="context_msg", content="one", created_at="2023-01-02")
    log.append(session_id="a", kind="context_msg", content="two", created_at="2023-01-01")
    log.append(session_id="b", agent_id="bot", kind="context_msg", content="three")
    summaries = {s.session_id: s for s in log.sessions()}
    assert summaries["a"].events == 2
    assert summaries["a"].first_at.startswith("2023-01-01")
    assert summaries["a"].last_at.startswith("2023-01-02")
    assert summaries["b"].agent_id == "bot"
    assert summaries["a"].tokens == 2


def test_reopening_migrates_once_and_keeps_seqs(tmp_path):
    path = tmp_path / "log.sqlite3"
    with EventLog(path) as log:
        log.append(session_id="s", kind="context_msg", content="kept")
    with EventLog(path) as log:
        assert log.get(1).content == "kept"
        assert log.append(session_id="s", kind="context_msg", content="next") == 2
        applied = log._reader().execute("SELECT name FROM _scroll_migrations").fetchall()
    assert [row[0] for row in applied] == [m.__name__ for m in MIGRATIONS]


def test_seqs_are_never_reused(tmp_path):
    path = tmp_path / "log.sqlite3"
    with EventLog(path) as log:
        log.append(session_id="s", kind="context_msg", content="x")
        with pytest.raises(InvalidEvent):
            log.append_many([{"session_id": "s", "kind": "k", "content": "y"}, {"bad": 1}])
        assert log.append(session_id="s", kind="context_msg", content="z") == 2


def test_a_closed_log_refuses_work(tmp_path):
    log = EventLog(tmp_path / "log.sqlite3")
    log.close()
    with pytest.raises(EventLogError, match="closed"):
        log.append(session_id="s", kind="context_msg", content="x")
