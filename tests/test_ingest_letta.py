"""Importing Letta (MemGPT) agent files."""

from __future__ import annotations

import json

import pytest

from scroll_core.errors import IngestError
from scroll_core.ingest import ingest


@pytest.fixture
def log(store):
    """Every test here that imports into ``log`` runs on SQLite and on PostgreSQL: importers
    write only through the Event Log interface."""
    return store


SESSION = "letta:memgpt_agent"
IN_CONTEXT = [89, 81, 80, 82, 83, 84, 85, 86, 87, 88, 90]


@pytest.fixture
def agent_file(shared_data):
    path = shared_data / "letta" / "memgpt_agent_with_convo.af"
    if not path.is_file():
        pytest.skip(f"Letta agent file not found at {path}")
    return path


def _agent(messages, in_context=None):
    return {"name": "tiny", "messages": messages, "in_context_message_indices": in_context or []}


def _msg(role, text, *, at="2025-04-01T03:47:27.492924", **extra):
    return {
        "role": role,
        "content": [{"type": "text", "text": text}],
        "created_at": at,
        "tool_calls": [],
        "tool_call_id": None,
        "tool_returns": [],
        **extra,
    }


def test_all_91_messages_arrive_with_tool_calls_split_out(log, agent_file):
    report = ingest(log, "letta", agent_file, progress=False)

    assert report.sessions == (SESSION,)
    # 91 messages; each of the 28 assistant messages with a call also has inner monologue.
    assert report.events_read == report.events_appended == 91 + 28
    events = log.session_events(SESSION, limit=None)
    assert len({e.metadata["letta_index"] for e in events}) == 91
    roles = [e.role for e in events if e.metadata.get("block") != "tool_call"]
    assert roles.count("tool") == 28 and roles.count("system") == 6


def test_tool_calls_and_returns_stay_paired(log, agent_file):
    ingest(log, "letta", agent_file, progress=False)

    events = log.session_events(SESSION, limit=None)
    calls = {e.tool_call_id: e for e in events if e.kind == "model_turn" and e.tool_call_id}
    results = [e for e in events if e.kind == "tool_result"]
    assert len(calls) == len(results) == 28
    for result in results:
        call = calls[result.tool_call_id]
        assert call.seq < result.seq
        assert result.name == call.name
    first_call = events[2]  # system prompt, inner monologue, then its call
    assert first_call.name == "send_message"
    assert first_call.tool_input == {"message": "More human than human is our motto."}


def test_in_context_indices_and_timestamps_are_kept(log, agent_file):
    ingest(log, "letta", agent_file, progress=False)

    events = log.session_events(SESSION, limit=None)
    flagged = {e.metadata["letta_index"] for e in events if e.metadata["in_context"]}
    assert flagged == set(IN_CONTEXT)
    system_now = next(e for e in events if e.metadata["letta_index"] == 89)
    assert system_now.metadata["in_context_position"] == 0
    assert (system_now.kind, system_now.role) == ("context_msg", "system")
    assert events[0].created_at == "2025-04-01T03:47:27.492924Z"
    stamps = [e.created_at for e in events]
    assert stamps == sorted(stamps)


def test_reimporting_appends_nothing(log, agent_file):
    ingest(log, "letta", agent_file, progress=False)

    again = ingest(log, "letta", agent_file, progress=False)

    assert (again.events_appended, again.events_already_present) == (0, 119)


def test_an_in_context_index_outside_the_messages_is_refused(log, tmp_path):
    path = tmp_path / "agent.af"
    path.write_text(json.dumps(_agent([_msg("user", "hi")], in_context=[0, 5])))

    with pytest.raises(IngestError) as caught:
        ingest(log, "letta", path, progress=False)

    assert caught.value.location == "$.in_context_message_indices[1]"
    assert log.count() == 0


def test_a_tool_call_without_a_name_names_its_json_path(log, tmp_path):
    call = {"id": "c1", "function": {"arguments": "{}"}, "type": "function"}
    messages = [_msg("user", "hi"), _msg("assistant", "thinking", tool_calls=[call])]
    path = tmp_path / "agent.af"
    path.write_text(json.dumps(_agent(messages)))

    with pytest.raises(IngestError, match="'name' is missing") as caught:
        ingest(log, "letta", path, progress=False)

    assert caught.value.location == "$.messages[1].tool_calls[0].function"
    assert log.count() == 0


def test_a_message_without_a_timestamp_is_refused(log, tmp_path):
    broken = _msg("user", "hi")
    del broken["created_at"]
    path = tmp_path / "agent.af"
    path.write_text(json.dumps(_agent([_msg("user", "first"), broken])))

    with pytest.raises(IngestError, match="'created_at' is missing") as caught:
        ingest(log, "letta", path, progress=False)

    assert caught.value.location == "$.messages[1]"


def test_a_file_that_is_not_an_agent_is_refused(log, tmp_path):
    path = tmp_path / "agent.af"
    path.write_text(json.dumps([1, 2, 3]))

    with pytest.raises(IngestError, match="must be a JSON object"):
        ingest(log, "letta", path, progress=False)
