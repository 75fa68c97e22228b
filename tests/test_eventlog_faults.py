"""Bad input and faults: nothing the caller gave is lost, and a crash leaves a sound log."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading

import pytest

from scroll_core import ArtifactRef, EventLog, InvalidEvent, ToolResultRef
from tests.backends import outside_connection

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def log(store):
    """Every test here that takes ``log`` runs on SQLite and on PostgreSQL."""
    return store


def test_nul_characters_round_trip_and_stay_searchable(log):
    seq = log.append(session_id="s", kind="tool_result", content="before\x00after marker")
    event = log.get(seq)
    if log.backend == "sqlite":
        assert event.content == "before\x00after marker" and event.payload is None
    else:  # PostgreSQL text cannot hold NUL: the exact text is the payload
        assert event.content == "before\ufffdafter marker"
        assert isinstance(event.payload, ToolResultRef)
        assert event.payload.load() == "before\x00after marker"
    assert seq in [h.seq for h in log.search("marker")]


@pytest.mark.parametrize(
    "field", ["agent_id", "role", "name", "tool_call_id", "headline", "dedup_key"]
)
def test_nul_in_a_short_field_is_refused_by_name_on_both_backends_and_writes_nothing(log, field):
    log.append(session_id="s", kind="tool_result", content="kept")
    before = log.last_seq()
    good = {"session_id": "s", "kind": "tool_result", "content": "good"}
    bad = {**good, field: "a\x00b"}
    with pytest.raises(InvalidEvent, match=f"event 1: {field} contains NUL"):
        log.append_many([good, bad])
    assert log.last_seq() == before  # the batch's good event is not written either
    assert [h.seq for h in log.search("kept")] == [before]
    # The same event without the NUL goes in.
    seq = log.append(**{**good, field: "ab"})
    assert getattr(log.get(seq), field) == "ab"


def test_non_utf8_bytes_are_kept_losslessly(log):
    raw = b"caf\xe9 \xff\xfe binary tail"
    seq = log.append(session_id="s", kind="tool_result", content=raw)
    event = log.get(seq)
    assert "caf\ufffd" in event.content
    assert isinstance(event.payload, ArtifactRef)
    assert event.payload.load() == raw


def test_valid_utf8_bytes_are_stored_as_text(log):
    seq = log.append(session_id="s", kind="tool_result", content="naïve".encode())
    assert log.get(seq).content == "naïve"
    assert log.get(seq).payload is None


def test_text_with_lone_surrogates_is_kept_losslessly(log):
    text = "ok \udcff still ok"
    seq = log.append(session_id="s", kind="tool_result", content=text)
    event = log.get(seq)
    assert "\udcff" not in event.content
    assert isinstance(event.payload, ToolResultRef)
    assert event.payload.load() == text


def test_a_100_mb_payload_is_stored_once_and_the_row_stays_small(log):
    big = "0123456789abcdef" * (100 * 1024 * 1024 // 16)
    seq = log.append(session_id="s", kind="tool_result", content=big, tool_call_id="c1")
    event = log.get(seq)
    assert len(event.content) == log.payload_threshold
    assert event.payload.size == len(big)
    assert event.tokens == log.tokens.count(event.content)
    assert event.payload.load() == big
    if log.backend == "sqlite":  # payloads are files beside it
        assert os.path.getsize(log.path) < 5 * 1024 * 1024
        return
    with outside_connection(log) as db:  # payloads are bytea rows, the event row stays small
        (row_bytes,) = db.execute(
            "SELECT pg_column_size(e.*) FROM events e WHERE seq = %s", (seq,)
        ).fetchone()
        (stored,) = db.execute("SELECT count(*) FROM payloads").fetchone()
    assert row_bytes < 64 * 1024 and stored == 1


@pytest.mark.parametrize(
    "stamp", ["", "yesterday", "2024-02-30", "2024-13-01T00:00:00Z", "12:00", "2024-01-01T25:00"]
)
def test_invalid_timestamps_are_refused_and_nothing_is_written(log, stamp):
    with pytest.raises(InvalidEvent, match="invalid created_at"):
        log.append(session_id="s", kind="context_msg", content="x", created_at=stamp)
    assert log.count() == 0


def test_timestamps_with_offsets_are_stored_in_utc(log):
    seq = log.append(session_id="s", kind="k", content="x", created_at="2024-01-01T01:30:00+05:30")
    assert log.get(seq).created_at == "2023-12-31T20:00:00.000000Z"


_WRITER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {repo!r})
    from scroll_core import EventLog, CharRatioCounter
    log = EventLog({path!r}, token_counter=CharRatioCounter())
    i = 0
    while True:
        batch = [dict(session_id="w", kind="tool_result", content=f"row {{i}} {{j}} " * 20)
                 for j in range(5)]
        seqs = log.append_many(batch)
        print(" ".join(map(str, seqs)), flush=True)
        i += 1
    """
)


def test_a_writer_killed_mid_stream_loses_nothing_it_reported(tmp_path):
    """SQLite only (its integrity_check and FTS5 index check); PostgreSQL's writer killed
    holding the seq lock is in tests/test_eventlog_postgres.py."""
    path = str(tmp_path / "log.sqlite3")
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITER.format(repo=REPO, path=path)],
        stdout=subprocess.PIPE,
        text=True,
    )
    reported: list[int] = []
    assert proc.stdout is not None
    while len(reported) < 2000:
        line = proc.stdout.readline()
        assert line, "writer exited early"
        reported.extend(int(s) for s in line.split())
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    proc.stdout.close()
    with EventLog(path) as log:
        assert log._reader().execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        present = {e.seq for e in log.range(reported[0], reported[-1])}
        assert set(reported) <= present
        assert len(log.search("row", k=5)) == 5
    # The FTS index still agrees with the table (raises SQLITE_CORRUPT_VTAB if not).
    db = sqlite3.connect(path)
    db.execute("INSERT INTO events_fts(events_fts, rank) VALUES ('integrity-check', 1)")
    db.close()


def test_two_processes_append_to_one_log_without_clashing(log):
    target = str(log.path) if log.backend == "sqlite" else log.url
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {REPO!r})
        from scroll_core import CharRatioCounter, open_event_store
        log = open_event_store(sys.argv[2], token_counter=CharRatioCounter())
        for i in range(200):
            log.append(session_id=sys.argv[1], kind="context_msg", content=f"m{{i}}")
        log.close()
        """
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", script, name, target]) for name in ("p1", "p2")
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    assert log.count("p1") == log.count("p2") == 200
    assert log.last_seq() == 400


def test_threads_read_while_one_writes(log):
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader() -> None:
        try:
            while not stop.is_set():
                log.search("alpha")
                log.sessions()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    for i in range(300):
        log.append(session_id="s", kind="context_msg", content=f"alpha {i}")
    stop.set()
    for t in threads:
        t.join()
    assert errors == []
    assert log.count() == 300
