"""The Responses API's shapes without a server: input items made into the gateway's messages
(an assistant's text and the calls after it are one message, as the gateway's reply was),
bad bodies refused by field, and the stream's events for each way a reply can go."""

from __future__ import annotations

import json

import pytest

from scroll_core.errors import GatewayRequestInvalid
from scroll_core.gateway import ClientMessage, ClientReply, GatewayStats
from scroll_core.gateway.responses_api import parse_responses_request, whole_response
from scroll_core.gateway.responses_stream import ResponseEvents
from scroll_core.models.base import ToolCall, Usage


def _parse(input_, **body):
    return parse_responses_request({"model": "gpt-test", "input": input_, **body})


def _reply(content="", calls=(), finish="stop"):
    return ClientReply(content, tuple(calls), finish, "up-model", Usage(7, 3), GatewayStats())


def test_an_assistants_text_and_the_calls_after_it_are_one_message():
    parsed = _parse(
        [
            {"role": "user", "content": [{"type": "input_text", "text": "Paris?"}]},
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "message", "role": "assistant",
             "content": [{"type": "output_text", "text": "Checking.", "annotations": []}]},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"a": 1}'},
            {"type": "function_call", "call_id": "c2", "name": "g", "arguments": ""},
            {"type": "function_call_output", "call_id": "c1", "output": "one"},
            {"type": "function_call_output", "call_id": "c2",
             "output": [{"type": "input_text", "text": "two"}]},
            {"type": "function_call", "call_id": "c3", "name": "f", "arguments": "{}"},
        ],
        instructions="Be brief.",
    )  # fmt: skip
    assert parsed.api == "responses" and parsed.system == "Be brief."
    user, said, one, two, alone = parsed.messages
    assert user == ClientMessage("user", "Paris?")
    assert (said.role, said.content) == ("assistant", "Checking.")
    assert [(c.id, c.name, c.arguments) for c in said.tool_calls] == [
        ("c1", "f", {"a": 1}),
        ("c2", "g", {}),
    ]
    assert (one.tool_call_id, one.content, two.content) == ("c1", "one", "two")
    # A call with no assistant text before it is an assistant message of its own.
    assert (alone.role, alone.content, [c.id for c in alone.tool_calls]) == (
        "assistant",
        "",
        ["c3"],
    )


def test_system_and_developer_messages_lead_the_system_text_or_stay_in_place():
    parsed = _parse(
        [
            {"role": "developer", "content": "Use tools."},
            {"role": "user", "content": "hi"},
            {"role": "system", "content": "Later note."},
        ],
        instructions="Be brief.",
    )
    assert parsed.system == "Be brief.\n\nUse tools."
    assert [m.role for m in parsed.messages] == ["user", "system"]
    assert parse_responses_request({"model": "m", "input": "hi"}).messages == (
        ClientMessage("user", "hi"),
    )


def test_an_assistant_message_may_have_no_content_as_in_chat_completions():
    parsed = _parse([{"role": "user", "content": "hi"}, {"role": "assistant", "content": None}])
    assert parsed.messages[-1] == ClientMessage("assistant", "")


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ([], "body"),
        ({"input": "hi"}, "model"),
        ({"model": "m", "input": "hi", "stream": "yes"}, "stream"),
        ({"model": "m", "input": "hi", "instructions": ["a"]}, "instructions"),
        ({"model": "m", "input": 5}, "input"),
        ({"model": "m", "input": [5]}, "input.0"),
        ({"model": "m", "input": [{"role": "tool", "content": "x"}]}, "input.0.role"),
        ({"model": "m", "input": [{"role": "user", "content": [{"type": "x"}]}]},
         "input.0.content.0.type"),
        ({"model": "m", "input": [{"role": "system", "content": "only"}]}, "input"),
        ({"model": "m", "input": [{"role": "user"}]}, "input.0.content"),
        ({"model": "m", "input": [{"type": "function_call_output", "output": "x"}]},
         "input.0.call_id"),
        ({"model": "m", "input": "hi", "tools": [{"type": "function"}]}, "tools.0.name"),
        ({"model": "m", "input": "hi", "tool_choice": {"type": "file_search"}}, "tool_choice"),
        ({"model": "m", "input": "hi", "text": {"format": {"type": "xml"}}}, "text.format.type"),
        ({"model": "m", "input": "hi", "background": True}, "background"),
        ({"model": "m", "input": "hi", "store": "yes"}, "store"),
        ({"model": "m", "input": "hi", "previous_response_id": ""}, "previous_response_id"),
        ({"model": "m", "input": "hi", "previous_response_id": 7}, "previous_response_id"),
    ],
)  # fmt: skip
def test_a_bad_body_is_refused_naming_its_field(body, param):
    with pytest.raises(GatewayRequestInvalid) as refused:
        parse_responses_request(body)
    assert refused.value.param == param


def test_a_whole_reply_holds_its_text_then_its_calls():
    call = ToolCall("call_1", "f", {"a": 1}, '{"a": 1}')
    body = whole_response(_parse("hi"), _reply("Sure.", [call], "tool_calls"))
    said, called = body["output"]
    assert said["content"][0]["text"] == "Sure." and said["status"] == "completed"
    assert (called["call_id"], called["name"], json.loads(called["arguments"])) == (
        "call_1",
        "f",
        {"a": 1},
    )
    assert body["status"] == "completed" and body["usage"]["total_tokens"] == 10
    empty = whole_response(_parse("hi"), _reply("", (), "length"))
    assert [i["type"] for i in empty["output"]] == ["message"]
    assert empty["status"] == "incomplete"
    assert empty["incomplete_details"] == {"reason": "max_output_tokens"}


def test_a_custom_tool_is_a_function_of_one_text_argument_and_hosted_tools_stay_out():
    parsed = _parse(
        [
            {"role": "user", "content": "patch it"},
            {"type": "custom_tool_call", "call_id": "p1", "name": "apply_patch", "input": "+x"},
            {"type": "custom_tool_call_output", "call_id": "p1", "output": "ok"},
        ],
        tools=[{"type": "custom", "name": "apply_patch"}, {"type": "file_search"}],
        tool_choice={"type": "custom", "name": "apply_patch"},
    )
    assert parsed.free_text_tools == {"apply_patch"}
    [tool] = parsed.tools
    assert tool["function"]["parameters"]["properties"]["input"]["type"] == "string"
    assert parsed.params["tool_choice"] == {"type": "function", "function": {"name": "apply_patch"}}
    _, called, result = parsed.messages
    assert called.tool_calls[0].arguments == {"input": "+x"} and result.tool_call_id == "p1"
    # A reply that calls it gives the client the text; anything else the model wrote, as is.
    wrote = [ToolCall("c1", "apply_patch", {"input": "+y"}, '{"input": "+y"}'),
             ToolCall("c2", "apply_patch", {"patch": "+z"}, '{"patch": "+z"}')]  # fmt: skip
    items = whole_response(parsed, _reply("", wrote, "tool_calls"))["output"]
    assert [(i["type"], i["input"]) for i in items] == [
        ("custom_tool_call", "+y"),
        ("custom_tool_call", '{"patch": "+z"}'),
    ]
    with pytest.raises(GatewayRequestInvalid) as refused:
        _parse([{"type": "custom_tool_call", "call_id": "p", "name": "apply_patch"}])
    assert refused.value.param == "input.0.input"


def test_a_custom_call_and_the_calls_after_it_go_out_whole_at_the_end_in_order():
    parsed = _parse("hi", tools=[{"type": "custom", "name": "apply_patch"}])
    stream = ResponseEvents(parsed)
    events = stream.start() + stream.text("Ok.")
    events += stream.block("start", {"type": "tool_use", "id": "c1", "name": "apply_patch"})
    events += stream.block("delta", {"type": "input_json_delta", "partial_json": '{"input"'})
    events += stream.block("start", {"type": "tool_use", "id": "c2", "name": "f"})
    assert _kinds(events)[-3:] == [  # the text is done; no call has gone out yet
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ]
    calls = [ToolCall("c1", "apply_patch", {"input": "+x"}, '{"input": "+x"}'),
             ToolCall("c2", "f", {}, "{}")]  # fmt: skip
    events += stream.end(_reply("Ok.", calls, "tool_calls"))
    output = events[-1]["response"]["output"]
    assert [(i["type"], i.get("call_id")) for i in output] == [
        ("message", None),
        ("custom_tool_call", "c1"),
        ("function_call", "c2"),
    ]
    assert output[1]["input"] == "+x"
    done = [e for e in events if e["type"] == "response.custom_tool_call_input.done"]
    assert [e["input"] for e in done] == ["+x"]


def _kinds(events):
    return [e["type"] for e in events]


def test_streamed_text_then_a_streamed_call_then_the_final_response():
    stream = ResponseEvents(_parse("hi"))
    events = stream.start() + stream.text("Writ") + stream.text("ing.")
    events += stream.block("start", {"type": "thinking"}) + stream.block("stop", None)
    events += stream.block("start", {"type": "tool_use", "id": "toolu_1", "name": "w"})
    events += stream.block("delta", {"type": "input_json_delta", "partial_json": '{"p": '})
    events += stream.block("delta", {"type": "input_json_delta", "partial_json": "1}"})
    events += stream.block("stop", None)
    call = ToolCall("toolu_1", "w", {"p": 1}, '{"p": 1}')
    events += stream.end(_reply("Writing.", [call], "tool_calls"))
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert _kinds(events) == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    final = events[-1]["response"]
    said, called = final["output"]
    assert said["content"][0]["text"] == "Writing."
    assert (called["call_id"], called["arguments"], called["status"]) == (
        "toolu_1",
        '{"p": 1}',
        "completed",
    )
    assert final["usage"]["input_tokens"] == 7 and "scroll" in final


def test_a_call_closed_without_arguments_gets_an_empty_object_and_unstreamed_calls_go_whole():
    stream = ResponseEvents(_parse("hi"))
    events = stream.start()
    events += stream.block("start", {"type": "tool_use", "id": "c1", "name": "now"})
    late = ToolCall("c2", "f", {"x": "y" * 100}, json.dumps({"x": "y" * 100}))
    events += stream.end(_reply("", [ToolCall("c1", "now", {}, ""), late], "tool_calls"))
    first, second = events[-1]["response"]["output"]
    assert (first["call_id"], first["arguments"]) == ("c1", "{}")
    assert (second["call_id"], json.loads(second["arguments"])) == ("c2", {"x": "y" * 100})
    pieces = [e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta"]
    assert pieces[0] == "{}" and "".join(pieces[1:]) == second["arguments"]
    assert len(pieces) > 2  # the whole call still goes out in stream-sized pieces


def test_text_not_streamed_goes_out_at_the_end_and_a_failure_closes_what_is_open():
    stream = ResponseEvents(_parse("hi"))
    events = stream.start() + stream.end(_reply("A replayed answer."), "A replayed answer.")
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == "A replayed answer."
    failing = ResponseEvents(_parse("hi"))
    events = failing.start() + failing.text("Half")
    events += failing.failed({"code": "upstream_error", "message": "upstream: cut"})
    assert _kinds(events)[-2:] == ["response.output_item.done", "response.failed"]
    failed = events[-1]["response"]
    assert failed["status"] == "failed" and failed["error"]["message"] == "upstream: cut"
    assert failed["output"][0]["content"][0]["text"] == "Half"
