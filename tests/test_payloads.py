from __future__ import annotations

import pytest

from scroll_core import ArtifactRef, PayloadCorrupt, PayloadMissing, ToolResultRef
from tests.backends import outside_connection
from tests.conftest import open_store


@pytest.fixture
def log(store):
    """Payloads keep one contract on both backends: files on SQLite, bytea on PostgreSQL."""
    return store


@pytest.fixture
def log_small(request, backend, tmp_path):
    """A fresh log on the same backend whose payload threshold is 100 characters."""
    with open_store(request, backend, tmp_path, payload_threshold=100) as small:
        yield small


@pytest.fixture
def sqlite_log(request, tmp_path):
    """SQLite's payload store is files on disk, which these tests damage by hand;
    PostgreSQL's sha256 check on load is in tests/test_eventlog_postgres.py."""
    with open_store(request, "sqlite", tmp_path) as event_log:
        yield event_log


def _stored_payloads(log) -> int:
    if log.backend == "sqlite":
        return len([p for p in log.payloads.root.rglob("*") if p.is_file()])
    with outside_connection(log) as db:
        return db.execute("SELECT count(*) FROM payloads").fetchone()[0]


def test_content_over_the_threshold_moves_whole_to_the_payload_store(log_small):
    log = log_small
    text = "line of output\n" * 50
    seq = log.append(session_id="s", kind="tool_result", content=text)
    event = log.get(seq)
    assert event.content == text[:100]
    assert event.is_preview
    assert isinstance(event.payload, ToolResultRef)
    assert event.payload.size == len(text)
    assert event.payload.load() == text


def test_content_at_the_threshold_stays_inline(log_small):
    seq = log_small.append(session_id="s", kind="tool_result", content="x" * 100)
    assert log_small.get(seq).payload is None


def test_an_explicit_payload_is_stored_and_loaded_as_json(log):
    seq = log.append(
        session_id="s", kind="tool_result", content="3 rows", payload={"rows": [1, 2, 3]}
    )
    handle = log.get(seq).payload
    assert isinstance(handle, ToolResultRef)
    assert handle.load() == {"rows": [1, 2, 3]}


def test_bytes_payloads_come_back_as_artifacts(log):
    seq = log.append(session_id="s", kind="tool_result", content="png", payload=b"\x89PNG\x00")
    handle = log.get(seq).payload
    assert isinstance(handle, ArtifactRef)
    assert handle.load() == b"\x89PNG\x00"


def test_identical_payloads_are_stored_once(log):
    a = log.append(session_id="s", kind="tool_result", content="a", payload="same " * 10)
    b = log.append(session_id="t", kind="tool_result", content="b", payload="same " * 10)
    assert log.get(a).payload_ref == log.get(b).payload_ref
    assert _stored_payloads(log) == 1


def test_a_missing_payload_file_names_the_reference(sqlite_log):
    log = sqlite_log
    seq = log.append(session_id="s", kind="tool_result", content="x", payload="gone soon")
    event = log.get(seq)
    log.payloads.path_for(event.payload_ref).unlink()
    with pytest.raises(PayloadMissing, match=event.payload_ref):
        event.payload.load()


def test_a_corrupted_payload_file_names_the_reference(sqlite_log):
    log = sqlite_log
    seq = log.append(session_id="s", kind="tool_result", content="x", payload="pristine")
    event = log.get(seq)
    log.payloads.path_for(event.payload_ref).write_text("tampered")
    with pytest.raises(PayloadCorrupt, match=event.payload_ref):
        event.payload.load()


def test_a_malformed_reference_is_a_clear_error(log):
    with pytest.raises(PayloadMissing, match="not a payload reference"):
        log.payloads.get("md5:abc")


def test_oversized_content_and_a_separate_payload_is_refused(log_small):
    from scroll_core import InvalidEvent

    with pytest.raises(InvalidEvent, match="separate payload"):
        log_small.append(session_id="s", kind="tool_result", content="x" * 500, payload="y")
    assert log_small.count() == 0
