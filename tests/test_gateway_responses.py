"""The Responses API through the gateway (``POST /v1/responses``), driven by the official
OpenAI client on a real server: whole and streamed replies, a client's tool calls and their
results round-tripping without a rewrite of the log, recall steps kept inside, the text and
the calls reaching the client while the scripted upstream is parked mid-reply (explicit
markers, no timing), and requests the gateway cannot serve refused by name. Stored responses
(``previous_response_id``, retrieve, delete) are ``test_gateway_responses_stored``."""

from __future__ import annotations

import json
import threading
from typing import Any

import openai
import pytest
from gateway_clients import WEATHER as CHAT_WEATHER
from gateway_clients import make_key, oa
from gateway_upstream import HEADLINE, a_message, a_tool_use, completion, error, text, tool_call

from scroll_core.prompts import RECALL_TOOL

pytestmark = pytest.mark.django_db(transaction=True)

# The Responses API's tool shape is flat: the function's fields beside its type.
WEATHER = {"type": "function", **CHAT_WEATHER["function"]}
NOTES = "line\n" * 40  # a file's content: its call's arguments come in more than one piece
WRITE = {
    "type": "function",
    "name": "write_file",
    "description": "Write a file.",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"},
                                                    "content": {"type": "string"}}},
}  # fmt: skip


def _items(response) -> list[dict[str, Any]]:
    """A response's output as the client sends it back in its next input."""
    return [item.model_dump(exclude_none=True) for item in response.output]


def test_a_whole_reply_is_a_response_object_with_the_headline_taken_out(gateway, upstream):
    upstream.then(text("Hello there."))
    client = oa(gateway, make_key(upstream))
    raw = client.responses.with_raw_response.create(
        model="gpt-test", instructions="Be brief.", input="hi", max_output_tokens=64
    )
    response = raw.parse()
    assert response.status == "completed" and response.output_text == "Hello there."
    assert response.id.startswith("resp_") and response.usage.input_tokens == 120
    assert raw.headers["X-Scroll-Session"].startswith("gw:alice:")
    assert response.to_dict()["scroll"]["upstream_calls"] == 1
    sent = upstream.requests[0]
    assert sent["max_tokens"] == 64 and sent["model"] == "upstream-model"
    assert "Be brief." in sent["messages"][0]["content"]  # instructions lead the view
    assert sent["messages"][-1] == {"role": "user", "content": "hi"}


def test_tool_calls_and_their_results_round_trip_without_rewriting_the_log(gateway, upstream):
    call = tool_call("get_weather", {"city": "Paris"}, "call_w1")
    upstream.then(completion(f"Checking.\n{HEADLINE}", [call]), text("Sunny in Paris."))
    client = oa(gateway, make_key(upstream))
    history: list[Any] = [{"role": "user", "content": "Weather in Paris?"}]
    first = client.responses.create(model="gpt-test", input=history, tools=[WEATHER])
    said, called = first.output
    assert said.type == "message" and first.output_text == "Checking."
    assert (called.type, called.call_id, called.name) == ("function_call", "call_w1", "get_weather")
    assert json.loads(called.arguments) == {"city": "Paris"}
    assert upstream.requests[0]["tools"][0]["function"]["name"] == "get_weather"
    # The client sends its history back with the output and the call's result.
    history += _items(first)
    history.append({"type": "function_call_output", "call_id": "call_w1", "output": "sunny"})
    second = client.responses.create(model="gpt-test", input=history, tools=[WEATHER])
    assert second.output_text == "Sunny in Paris."
    scroll = second.to_dict()["scroll"]
    assert scroll["rewritten"] is False and scroll["appended"] == 1  # only the result
    result = upstream.requests[1]["messages"][-1]
    assert (result["role"], result["tool_call_id"], result["content"]) == (
        "tool",
        "call_w1",
        "sunny",
    )


def test_text_streams_while_the_upstream_is_still_writing(gateway, upstream):
    answer = "The quick brown fox jumps over the lazy dog."
    reply = text(answer)
    reply.hold, reply.hold_after = threading.Event(), 2
    upstream.then(reply)
    client = oa(gateway, make_key(upstream))
    kinds, got, final = [], "", None
    for event in client.responses.create(model="gpt-test", input="pangram", stream=True):
        kinds.append(event.type)
        if event.type == "response.output_text.delta":
            got += event.delta
            if not reply.hold.is_set():
                assert not reply.done.is_set()  # the upstream is parked mid-reply
                reply.hold.set()
        if event.type == "response.completed":
            final = event.response
    assert reply.hold.is_set() and got == answer  # the headline never reached the client
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert final.output_text == answer and final.usage.output_tokens == 12
    assert final.to_dict()["scroll"]["upstream_calls"] == 1


def test_a_call_streams_its_arguments_as_the_upstream_writes_them(gateway, upstream):
    call = tool_call("write_file", {"path": "notes.txt", "content": NOTES}, "call_w1")
    reply = completion(f"Writing the file.\n{HEADLINE}", [call])
    reply.hold, reply.hold_on, reply.hold_after = threading.Event(), "arguments", 1
    upstream.then(reply, text("Done."))
    client = oa(gateway, make_key(upstream))
    history: list[Any] = [{"role": "user", "content": "save my notes"}]
    with client.responses.stream(model="gpt-test", input=history, tools=[WRITE]) as stream:
        for event in stream:
            if event.type == "response.function_call_arguments.delta" and not reply.hold.is_set():
                assert not reply.done.is_set()  # the upstream is parked mid-call
                reply.hold.set()
        final = stream.get_final_response()
    assert reply.hold.is_set()
    said, called = final.output
    assert final.output_text == "Writing the file." and said.status == "completed"
    assert (called.call_id, called.name, called.status) == ("call_w1", "write_file", "completed")
    assert json.loads(called.arguments) == {"path": "notes.txt", "content": NOTES}
    # What was streamed goes back as the next input: only the result is new.
    history += _items(final)
    history.append({"type": "function_call_output", "call_id": "call_w1", "output": "written"})
    again = client.responses.create(model="gpt-test", input=history, tools=[WRITE])
    assert again.output_text == "Done."
    scroll = again.to_dict()["scroll"]
    assert scroll["rewritten"] is False and scroll["appended"] == 1


def test_an_anthropic_upstreams_call_streams_to_a_responses_client(gateway, upstream):
    reply = a_message(
        [
            {"type": "text", "text": f"Writing.\n{HEADLINE}"},
            a_tool_use("write_file", {"path": "a.txt", "content": NOTES}, "toolu_1"),
        ]
    )
    reply.hold, reply.hold_on, reply.hold_after = threading.Event(), "input_json_delta", 1
    upstream.then(reply)
    key = make_key(upstream, upstream_format="anthropic", upstream_base_url=upstream.root,
                   model_map={"*": "claude-upstream"})  # fmt: skip
    client = oa(gateway, key)
    with client.responses.stream(model="gpt-test", input="save it", tools=[WRITE]) as stream:
        for event in stream:
            if event.type == "response.function_call_arguments.delta" and not reply.hold.is_set():
                assert not reply.done.is_set()
                reply.hold.set()
        final = stream.get_final_response()
    assert reply.hold.is_set()
    [called] = [item for item in final.output if item.type == "function_call"]
    assert (called.call_id, called.name) == ("toolu_1", "write_file")
    assert json.loads(called.arguments) == {"path": "a.txt", "content": NOTES}


def test_a_recall_step_runs_inside_and_its_call_never_reaches_the_client(gateway, upstream):
    client = oa(gateway, make_key(upstream))
    upstream.then(text("Noted."))
    first = client.responses.create(model="gpt-test", input="the code word is PELICAN")
    code = "print('found', [h.snippet for h in ms.search('PELICAN', k=3)])"
    upstream.then(
        completion(f"Let me look.\n{HEADLINE}", [tool_call(RECALL_TOOL, {"code": code}, "c_r")]),
        text("It was PELICAN."),
    )
    history: list[Any] = [{"role": "user", "content": "the code word is PELICAN"}]
    history += [*_items(first), {"role": "user", "content": "what was it?"}]
    with client.responses.stream(model="gpt-test", input=history, tools=[WEATHER]) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert final.output_text == "Let me look.\n\nIt was PELICAN."
    assert [item.type for item in final.output] == ["message"]
    assert "response.function_call_arguments.delta" not in kinds
    printout = [m for m in upstream.requests[2]["messages"] if m["role"] == "tool"]
    assert "found" in printout[-1]["content"] and "PELICAN" in printout[-1]["content"]


def test_a_reply_cut_at_its_token_limit_is_incomplete(gateway, upstream):
    cut = text("Half an ans")
    cut.body["choices"][0]["finish_reason"] = "length"
    again = text("Half an ans")
    again.body["choices"][0]["finish_reason"] = "length"
    upstream.then(cut, again)
    client = oa(gateway, make_key(upstream))
    whole = client.responses.create(model="gpt-test", input="long answer", max_output_tokens=5)
    assert whole.status == "incomplete" and whole.incomplete_details.reason == "max_output_tokens"
    kinds = [
        e.type
        for e in client.responses.create(
            model="gpt-test", input="long answer again", max_output_tokens=5, stream=True
        )
    ]
    assert kinds[-1] == "response.incomplete"


def test_options_reach_the_upstream_under_chat_completions_names(gateway, upstream):
    upstream.then(text('{"ok": true}'))
    client = oa(gateway, make_key(upstream))
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}}
    client.responses.create(
        model="gpt-test",
        input="json please",
        tools=[WEATHER],
        tool_choice={"type": "function", "name": "get_weather"},
        text={"format": {"type": "json_schema", "name": "answer", "schema": schema}},
        reasoning={"effort": "low"},
        temperature=0.2,
        store=False,
    )
    sent = upstream.requests[0]
    assert sent["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert sent["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "answer", "schema": schema},
    }
    assert sent["reasoning_effort"] == "low" and sent["temperature"] == 0.2
    assert "store" not in sent


PATCH = {
    "type": "custom",
    "name": "apply_patch",
    "description": "Edit files with a patch.",
    "format": {"type": "grammar", "syntax": "lark", "definition": "start: patch"},
}
PATCH_TEXT = "*** Begin Patch\n*** Add File: a.txt\n+hello\n*** End Patch"


@pytest.mark.parametrize("stream", [False, True])
def test_a_custom_tools_call_reaches_the_client_as_free_text_and_round_trips(
    gateway, upstream, stream
):
    call = tool_call("apply_patch", {"input": PATCH_TEXT}, "call_p1")
    upstream.then(completion(f"Patching.\n{HEADLINE}", [call]), text("Patched."))
    client = oa(gateway, make_key(upstream))
    tools = [PATCH, WEATHER, {"type": "web_search"}]
    history: list[Any] = [{"role": "user", "content": "add a.txt"}]
    if stream:
        with client.responses.stream(model="gpt-test", input=history, tools=tools) as events:
            kinds = [event.type for event in events]
            first = events.get_final_response()
        assert "response.custom_tool_call_input.done" in kinds
    else:
        first = client.responses.create(model="gpt-test", input=history, tools=tools)
    _, called = first.output
    assert first.output_text == "Patching."
    assert (called.type, called.call_id, called.name) == (
        "custom_tool_call",
        "call_p1",
        "apply_patch",
    )
    assert called.input == PATCH_TEXT  # the text itself, not JSON around it
    offered = {t["function"]["name"]: t["function"] for t in upstream.requests[0]["tools"]}
    assert set(offered) == {"apply_patch", "get_weather"}  # no recall tool before an eviction
    patch = offered["apply_patch"]["parameters"]
    assert patch["required"] == ["input"]  # the hosted web_search was not offered upstream
    assert "start: patch" in patch["properties"]["input"]["description"]
    history += _items(first)
    history.append({"type": "custom_tool_call_output", "call_id": "call_p1", "output": "done"})
    again = client.responses.create(model="gpt-test", input=history, tools=tools)
    assert again.output_text == "Patched."
    scroll = again.to_dict()["scroll"]
    assert scroll["rewritten"] is False and scroll["appended"] == 1


@pytest.mark.parametrize(
    ("body", "param", "said"),
    [
        ({"input": "hi", "previous_response_id": "resp_1"}, "previous_response_id", "no stored"),
        ({"input": "hi", "conversation": "conv_1"}, "conversation", "no conversation"),
        ({"input": "hi", "conversation": {"id": 7}}, "conversation", "conversation id"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input.0.type", "item_reference"),
        (
            {
                "input": "hi",
                "tools": [{"type": "web_search"}],
                "tool_choice": {"type": "web_search"},
            },
            "tool_choice",
            "hosted tool",
        ),
        ({"input": [{"type": "computer_call_output"}]}, "input.0.type", "computer_call"),
        ({"input": [{"type": "function_call", "name": "f"}]}, "input.0.call_id", "required"),
        ({"input": []}, "input", "non-empty"),
        ({"input": "hi", "max_output_tokens": 0}, "max_output_tokens", "positive"),
    ],
)
def test_a_request_the_gateway_cannot_serve_is_refused_by_name(
    gateway, upstream, body, param, said
):
    client = oa(gateway, make_key(upstream))
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="gpt-test", **body)
    assert refused.value.status_code == 400 and refused.value.body["param"] == param
    assert said in refused.value.body["message"]
    assert upstream.requests == []  # nothing reached the upstream


def test_keys_and_upstream_failures_keep_the_openai_error_shape(gateway, upstream):
    with pytest.raises(openai.AuthenticationError):
        oa(gateway, "sk-not-a-key").responses.create(model="gpt-test", input="hi")
    upstream.then(error(429, "slow down", "rate_limit_exceeded"))
    client = oa(gateway, make_key(upstream))
    with pytest.raises(openai.RateLimitError) as limited:
        client.responses.create(model="gpt-test", input="hi", stream=True)
    assert "slow down" in limited.value.body["message"]


def test_a_failure_after_the_stream_began_ends_it_with_response_failed(gateway, upstream):
    reply = text("This reply dies after a few pieces of text.")
    reply.cut_after = 2
    upstream.then(reply)
    client = oa(gateway, make_key(upstream))
    events = list(client.responses.create(model="gpt-test", input="hi", stream=True))
    assert events[-1].type == "response.failed"
    failed = events[-1].response
    assert failed.status == "failed" and failed.error.message.startswith("upstream:")
    assert "response.output_text.delta" in [e.type for e in events]


def test_an_unknown_stored_response_is_not_found_in_the_openai_shape(gateway, upstream):
    client = oa(gateway, make_key(upstream))
    for ask in (client.responses.retrieve, client.responses.delete, client.responses.cancel):
        with pytest.raises(openai.NotFoundError) as missing:
            ask("resp_0123")
        assert missing.value.body["code"] == "response_not_found"
        assert "no stored response 'resp_0123'" in missing.value.body["message"]
    with pytest.raises(openai.AuthenticationError):
        oa(gateway, "sk-not-a-key").responses.retrieve("resp_0123")
    assert upstream.requests == []
