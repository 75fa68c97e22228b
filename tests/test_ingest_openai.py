"""Importing OpenAI chat messages: a JSON list, an object with messages, or JSONL."""

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


CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
}
MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": [{"type": "text", "text": "Weather in Oslo?"}]},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_1", "content": '{"temp_c": -3}'},
    {"role": "assistant", "content": "It is -3 °C in Oslo."},
]


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.fixture(params=["list", "object", "jsonl"])
def chat_file(request, tmp_path):
    if request.param == "list":
        return _write(tmp_path, "chat.json", json.dumps(MESSAGES))
    if request.param == "object":
        return _write(tmp_path, "chat.json", json.dumps({"messages": MESSAGES}))
    return _write(tmp_path, "chat.jsonl", "\n".join(json.dumps(m) for m in MESSAGES))


def test_every_shape_yields_the_same_events(log, chat_file):
    report = ingest(log, "openai", chat_file, progress=False)

    assert report.sessions == ("openai:chat",)
    events = log.session_events("openai:chat")
    assert [(e.kind, e.role) for e in events] == [
        ("context_msg", "system"),
        ("context_msg", "user"),
        ("model_turn", "assistant"),
        ("tool_result", "tool"),
        ("model_turn", "assistant"),
    ]
    assert events[1].content == "Weather in Oslo?"


def test_tool_calls_and_results_are_paired_and_inputs_parsed(log, chat_file):
    ingest(log, "openai", chat_file, progress=False)

    events = log.session_events("openai:chat")
    call, result = events[2], events[3]
    assert (call.name, call.tool_call_id) == ("get_weather", "call_1")
    assert call.tool_input == {"city": "Oslo"}
    assert (result.name, result.tool_call_id) == ("get_weather", "call_1")
    assert result.content == '{"temp_c": -3}'


def test_reimporting_appends_nothing(log, chat_file):
    ingest(log, "openai", chat_file, progress=False)

    again = ingest(log, "openai", chat_file, progress=False)

    assert (again.events_read, again.events_appended, again.events_already_present) == (5, 0, 5)


def test_assistant_text_and_several_calls_become_separate_events(log, tmp_path):
    second = {**CALL, "id": "call_2", "function": {"name": "get_time", "arguments": "{}"}}
    messages = [
        {"role": "user", "content": "Weather and time?"},
        {"role": "assistant", "content": "Checking both.", "tool_calls": [CALL, second]},
        {"role": "tool", "tool_call_id": "call_2", "content": "09:00"},
        {"role": "tool", "tool_call_id": "call_1", "content": "-3"},
    ]
    path = _write(tmp_path, "multi.json", json.dumps(messages))

    ingest(log, "openai", path, progress=False)

    events = log.session_events("openai:multi")
    assert [e.name for e in events] == [
        None,
        None,
        "get_weather",
        "get_time",
        "get_time",
        "get_weather",
    ]
    assert events[1].content == "Checking both."


def test_created_at_is_taken_from_the_message_when_given(log, tmp_path):
    messages = [
        {"role": "user", "content": "a", "created_at": 1718359200},
        {"role": "user", "content": "b", "timestamp": "2024-06-14T10:00:05+02:00"},
    ]
    path = _write(tmp_path, "dated.json", json.dumps(messages))

    ingest(log, "openai", path, progress=False)

    stamps = [e.created_at for e in log.session_events("openai:dated")]
    assert stamps == ["2024-06-14T10:00:00.000000Z", "2024-06-14T08:00:05.000000Z"]


def test_a_tool_result_without_its_call_is_refused(log, tmp_path):
    messages = [MESSAGES[0], {"role": "tool", "tool_call_id": "nope", "content": "x"}]
    path = _write(tmp_path, "orphan.json", json.dumps(messages))

    with pytest.raises(IngestError, match="answers no earlier assistant tool call") as caught:
        ingest(log, "openai", path, progress=False)

    assert caught.value.location == "$[1]"
    assert log.count() == 0


def test_a_malformed_jsonl_line_reports_its_number(log, tmp_path):
    lines = [json.dumps(m) for m in MESSAGES[:2]] + ['{"role": "user", "content": ']
    path = _write(tmp_path, "broken.jsonl", "\n".join(lines))

    with pytest.raises(IngestError) as caught:
        ingest(log, "openai", path, progress=False)

    assert caught.value.location == "line 3"
    assert log.count() == 0


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        ({"content": "no role"}, "'role' is missing"),
        ({"role": "wizard", "content": "x"}, "unknown role 'wizard'"),
        ({"role": "user", "content": [{"type": "hologram"}]}, "unsupported content part"),
        ({"role": "assistant", "tool_calls": [{"id": "c", "function": {}}]}, "'name'"),
    ],
)
def test_malformed_messages_are_refused_with_their_index(log, tmp_path, message, reason):
    path = _write(tmp_path, "bad.json", json.dumps({"messages": [MESSAGES[0], message]}))

    with pytest.raises(IngestError, match=reason) as caught:
        ingest(log, "openai", path, progress=False)

    assert caught.value.location.startswith("$.messages[1]")
    assert log.count() == 0


def test_a_json_document_of_the_wrong_shape_is_refused(log, tmp_path):
    path = _write(tmp_path, "odd.json", json.dumps({"conversation": []}))

    with pytest.raises(IngestError, match="expected a list of messages"):
        ingest(log, "openai", path, progress=False)


def test_a_session_id_overrides_the_file_name(log, chat_file):
    report = ingest(log, "openai", chat_file, session_id="run-7", progress=False)

    assert report.sessions == ("run-7",)
    assert log.count("run-7") == 5
