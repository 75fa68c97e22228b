"""Importing Claude Code session transcripts (JSONL)."""

from __future__ import annotations

import json

import pytest

from scroll_core.errors import IngestError
from scroll_core.ingest import FORMATS, ingest
from tests.conftest import open_store


@pytest.fixture
def log(store):
    """Every test here that imports into ``log`` runs on SQLite and on PostgreSQL: importers
    write only through the Event Log interface."""
    return store


@pytest.fixture
def log_small(request, backend, tmp_path):
    """A fresh log on the same backend whose payload threshold is 100 characters."""
    with open_store(request, backend, tmp_path, payload_threshold=100) as small:
        yield small


VALID_FILES = {
    "representative_messages.jsonl": ("claude-code:test_session", 12),
    "session_b.jsonl": ("claude-code:session_b", 3),
    "todowrite_examples.jsonl": ("claude-code:todowrite_session", 12),
}


@pytest.fixture
def claude_dir(shared_data):
    folder = shared_data / "claude-code"
    if not folder.is_dir():
        pytest.skip(f"Claude Code transcripts not found at {folder}")
    return folder


def _line(uuid, role, content, *, ts="2025-06-14T10:00:00Z", session="s1", **extra):
    record = {
        "type": role,
        "uuid": uuid,
        "parentUuid": None,
        "sessionId": session,
        "timestamp": ts,
        "message": {"role": role, "content": content},
        **extra,
    }
    return json.dumps(record)


def _write(tmp_path, *lines, name="session.jsonl"):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def _pairs(events):
    calls = {e.tool_call_id: e for e in events if e.kind == "model_turn" and e.tool_call_id}
    results = [e for e in events if e.kind == "tool_result"]
    return calls, results


def test_claude_code_is_a_known_format():
    assert "claude-code" in FORMATS


@pytest.mark.parametrize("name", sorted(VALID_FILES))
def test_each_real_transcript_imports_into_its_session(log, claude_dir, name):
    session, expected = VALID_FILES[name]

    report = ingest(log, "claude-code", claude_dir / name, progress=False)

    assert report.sessions == (session,)
    assert report.events_read == report.events_appended == expected
    assert log.count(session) == expected


def test_tool_uses_and_results_stay_paired_by_id(log, claude_dir):
    for name in VALID_FILES:
        ingest(log, "claude-code", claude_dir / name, progress=False)

    for session in ("claude-code:test_session", "claude-code:todowrite_session"):
        events = log.session_events(session, limit=None)
        calls, results = _pairs(events)
        assert len(results) == len(calls) >= 2
        for result in results:
            call = calls[result.tool_call_id]
            assert call.seq < result.seq
            assert result.name == call.name
            assert result.metadata.get("unpaired") is None


def test_blocks_keep_roles_kinds_inputs_and_timestamps(log, claude_dir):
    ingest(log, "claude-code", claude_dir / "representative_messages.jsonl", progress=False)

    events = log.session_events("claude-code:test_session", limit=None)
    kinds = [(e.kind, e.role) for e in events[:2]]
    assert kinds == [("context_msg", "user"), ("model_turn", "assistant")]
    assert events[0].created_at == "2025-06-14T10:00:00.000000Z"
    assert events[1].created_at == "2025-06-14T10:00:30.000000Z"
    bash = next(e for e in events if e.name == "Bash" and e.kind == "model_turn")
    assert bash.tool_input["command"] == "python /tmp/decorator_example.py"
    output = next(e for e in events if e.tool_call_id == bash.tool_call_id and e != bash)
    assert output.content == "Hello, Alice!\nHello, Alice!\nHello, Alice!"
    assert output.metadata["is_error"] is False


def test_summary_lines_become_system_context_of_their_leaf_session(log, claude_dir):
    ingest(log, "claude-code", claude_dir / "todowrite_examples.jsonl", progress=False)

    events = log.session_events("claude-code:todowrite_session", limit=None)
    summary = [e for e in events if e.name == "summary"]
    assert len(summary) == 1
    assert summary[0].content == "Feature Implementation with Task Management"
    assert (summary[0].kind, summary[0].role) == ("context_msg", "system")
    assert summary[0].metadata["leaf_uuid"] == "assistant_006"
    assert summary[0].created_at == "2025-06-14T10:04:00.000000Z"


def test_structured_tool_use_result_is_kept_in_metadata(log, claude_dir):
    ingest(log, "claude-code", claude_dir / "todowrite_examples.jsonl", progress=False)

    events = log.session_events("claude-code:todowrite_session")
    results = [e for e in events if e.kind == "tool_result"]
    assert results[0].name == "TodoWrite"
    assert results[0].metadata["tool_use_result"]["oldTodos"] == []


def test_reimporting_appends_nothing(log, claude_dir):
    path = claude_dir / "representative_messages.jsonl"
    ingest(log, "claude-code", path, progress=False)

    again = ingest(log, "claude-code", path, progress=False)

    assert (again.events_appended, again.events_already_present) == (0, 12)
    assert log.count() == 12


def test_the_malformed_edge_cases_file_reports_its_first_bad_line_and_ingests_nothing(
    log, claude_dir
):
    ingest(log, "claude-code", claude_dir / "session_b.jsonl", progress=False)

    with pytest.raises(IngestError) as caught:
        ingest(log, "claude-code", claude_dir / "edge_cases.jsonl", progress=False)

    error = caught.value
    assert error.path.endswith("edge_cases.jsonl")
    assert error.location == "line 10"
    assert "no 'content'" in error.reason
    for later in ("line 11", "line 13", "line 14", "line 15", "line 16", "line 18"):
        assert later in error.reason
    assert "edge_cases.jsonl:line 10" in str(error)
    assert log.count() == 3  # only what was there before
    assert [s.session_id for s in log.sessions()] == ["claude-code:session_b"]


def test_an_invalid_json_line_is_reported_with_its_number(log, tmp_path):
    path = _write(
        tmp_path,
        _line("u1", "user", "hello"),
        "",
        '{"type": "assistant", "uuid": ',
    )

    with pytest.raises(IngestError) as caught:
        ingest(log, "claude-code", path, progress=False)

    assert caught.value.location == "line 3"
    assert "invalid JSON" in caught.value.reason
    assert log.count() == 0


@pytest.mark.parametrize(
    ("bad_line", "reason"),
    [
        ('"just a string"', "must be a JSON object"),
        ('{"type": "user", "uuid": "u2", "sessionId": "s1", "message": {}}', "timestamp"),
        (_line("u2", "user", "x", ts="not a time"), "not an ISO-8601 timestamp"),
        (_line("u2", "user", ["wow error"]), "content block"),
        (_line("u2", "user", [{"type": "hologram"}]), "unsupported content block"),
        ('{"type": "mystery"}', "unknown record type"),
    ],
)
def test_malformed_lines_name_the_line_and_reason(log, tmp_path, bad_line, reason):
    path = _write(tmp_path, _line("u1", "user", "hello"), bad_line)

    with pytest.raises(IngestError, match=reason) as caught:
        ingest(log, "claude-code", path, progress=False)

    assert caught.value.location.startswith("line 2")  # e.g. "line 2 content[0]"
    assert log.count() == 0


def test_a_session_override_replaces_the_session_id(log, claude_dir):
    report = ingest(
        log, "claude-code", claude_dir / "session_b.jsonl", session_id="mine", progress=False
    )

    assert report.sessions == ("mine",)
    assert log.count("mine") == 3


def test_a_repeated_uuid_is_kept_once(log, tmp_path):
    path = _write(
        tmp_path,
        _line("u1", "user", "hello"),
        _line("u1", "user", "hello"),
        _line("u2", "assistant", [{"type": "text", "text": "hi"}]),
    )

    report = ingest(log, "claude-code", path, progress=False)

    assert (report.events_read, report.records_skipped) == (2, 1)
    assert log.count() == 2


def test_thinking_and_multiple_blocks_become_one_event_each(log, tmp_path):
    blocks = [
        {"type": "thinking", "thinking": "the user wants a listing"},
        {"type": "text", "text": "Listing files."},
        {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}},
        {"type": "tool_use", "id": "t2", "name": "Read", "input": {"file_path": "/a"}},
    ]
    results = [
        {"type": "tool_result", "tool_use_id": "t2", "content": [{"type": "text", "text": "A"}]},
        {"type": "tool_result", "tool_use_id": "t1", "content": "a\nb", "is_error": True},
    ]
    path = _write(
        tmp_path,
        _line("u1", "assistant", blocks),
        _line("u2", "user", results, ts="2025-06-14T10:00:05Z"),
    )

    ingest(log, "claude-code", path, progress=False)

    events = log.session_events("claude-code:s1")
    assert [e.metadata["block"] for e in events] == [
        "thinking",
        "text",
        "tool_use",
        "tool_use",
        "tool_result",
        "tool_result",
    ]
    _, results_ = _pairs(events)
    assert {r.tool_call_id: r.name for r in results_} == {"t2": "Read", "t1": "Bash"}
    assert results_[1].metadata["is_error"] is True
    assert results_[0].content == "A"


def test_a_result_without_its_call_is_kept_and_marked_unpaired(log, tmp_path):
    result = [{"type": "tool_result", "tool_use_id": "gone", "content": "out"}]
    path = _write(tmp_path, _line("u1", "user", result))

    ingest(log, "claude-code", path, progress=False)

    (event,) = log.session_events("claude-code:s1")
    assert event.kind == "tool_result"
    assert event.metadata["unpaired"] is True


def test_a_large_tool_output_goes_to_the_payload_store(log_small, tmp_path):
    big = "line of output\n" * 200
    path = _write(
        tmp_path,
        _line("u1", "assistant", [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}]),
        _line("u2", "user", [{"type": "tool_result", "tool_use_id": "t1", "content": big}]),
    )

    ingest(log_small, "claude-code", path, progress=False)

    result = log_small.session_events("claude-code:s1")[-1]
    assert result.payload is not None
    assert result.payload.load() == big
    assert len(result.content) <= 100


def test_an_empty_file_is_refused(log, tmp_path):
    path = _write(tmp_path, "")

    with pytest.raises(IngestError, match="no messages"):
        ingest(log, "claude-code", path, progress=False)


def test_a_missing_file_is_an_ingest_error(log, tmp_path):
    with pytest.raises(IngestError, match="file not found"):
        ingest(log, "claude-code", tmp_path / "nope.jsonl", progress=False)


def test_an_unknown_format_is_refused(log, tmp_path):
    with pytest.raises(IngestError, match="unknown format 'vcard'"):
        ingest(log, "vcard", tmp_path / "x", progress=False)


def test_progress_bar_is_drawn_on_stderr_only_when_asked(log, tmp_path, capsys):
    path = _write(tmp_path, _line("u1", "user", "hello"))
    ingest(log, "claude-code", path, progress=False)
    assert capsys.readouterr().err == ""

    ingest(log, "claude-code", path, session_id="other", progress=True)
    assert "ingest session.jsonl" in capsys.readouterr().err


def test_progress_defaults_to_off_when_stderr_is_not_a_terminal(log, tmp_path, capsys):
    path = _write(tmp_path, _line("u1", "user", "hello"))

    ingest(log, "claude-code", path)

    assert capsys.readouterr().err == ""


def test_session_ids_are_namespaced_like_the_other_importers(log, tmp_path):
    path = _write(tmp_path, _line("u1", "user", "hello", session="abc-123"))

    report = ingest(log, "claude-code", path, progress=False)

    # As "locomo:conv-26": the source's own id under the format's name, never bare.
    assert report.sessions == ("claude-code:abc-123",)
    assert log.count("abc-123") == 0
    # An explicit --session still wins.
    other = ingest(log, "claude-code", path, session_id="mine", progress=False)
    assert other.sessions == ("mine",)
