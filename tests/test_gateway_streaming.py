"""Streaming through the gateway: the upstream's text reaches the client as it is written
(explicit markers: the scripted upstream holds mid-reply until the test lets it go), recall
steps run inside the stream without their calls ever reaching the client, and what the client
saw is what the log records."""

from __future__ import annotations

import json
import threading
from typing import Any

import openai
import pytest
from gateway_clients import WEATHER, an, make_key, oa
from gateway_upstream import HEADLINE, a_message, a_tool_use, completion, error, text, tool_call

from scroll_core.prompts import RECALL_TOOL

pytestmark = pytest.mark.django_db(transaction=True)

ANSWER = "The quick brown fox jumps over the lazy dog."
NOTES = "line\n" * 40  # a file's content: its call's arguments come in more than one piece
WRITE = {
    "type": "function",
    "function": {
        "name": "write_file",
        "description": "Write a file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"},
                                                        "content": {"type": "string"}}},
    },
}  # fmt: skip


def _held(reply, after=2):
    reply.hold = threading.Event()
    reply.hold_after = after
    return reply


def test_the_openai_client_gets_text_while_the_upstream_is_still_writing(gateway, upstream):
    reply = _held(text(ANSWER))
    upstream.then(reply)
    client = oa(gateway, make_key(upstream))
    stream = client.chat.completions.create(
        model="gpt-test",
        messages=[{"role": "user", "content": "say the pangram"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    got, early, usage = [], None, None
    for chunk in stream:
        usage = chunk.usage or usage
        piece = chunk.choices[0].delta.content if chunk.choices else None
        if piece:
            got.append(piece)
            if early is None:
                # The upstream is parked mid-reply: this text came through live.
                assert not reply.done.is_set()
                early = "".join(got)
                reply.hold.set()
    assert early and ANSWER.startswith(early)
    assert "".join(got) == ANSWER  # the headline never reached the client
    assert reply.done.is_set() and usage.prompt_tokens == 120
    assert upstream.requests[0]["stream"] is True


def test_a_recall_inside_a_stream_runs_and_its_call_never_reaches_the_client(gateway, upstream):
    client = oa(gateway, make_key(upstream))
    first = client.chat.completions.create(
        model="gpt-test", messages=[{"role": "user", "content": "the code word is PELICAN"}]
    )
    code = "print('found', [h.snippet for h in ms.search('PELICAN', k=3)])"
    answer = _held(text("It was PELICAN, as you said."), after=1)
    upstream.then(
        completion(f"Let me look.\n{HEADLINE}", [tool_call(RECALL_TOOL, {"code": code}, "c_r")]),
        answer,
    )
    history = [
        {"role": "user", "content": "the code word is PELICAN"},
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "what was it?"},
    ]
    got, calls, finish, early = [], [], None, None
    for chunk in client.chat.completions.create(
        model="gpt-test", messages=history, tools=[WEATHER], stream=True
    ):
        delta = chunk.choices[0].delta
        calls += delta.tool_calls or []
        finish = chunk.choices[0].finish_reason or finish
        if delta.content:
            got.append(delta.content)
            if "It was" in "".join(got) and early is None:
                assert not answer.done.is_set()  # live, after the recall
                early = "".join(got)
                answer.hold.set()
    shown = "".join(got)
    assert shown == "Let me look.\n\nIt was PELICAN, as you said."
    assert calls == [] and finish == "stop"  # the recall call stayed inside
    printout = [m for m in upstream.requests[2]["messages"] if m["role"] == "tool"]
    assert "found" in printout[-1]["content"] and "PELICAN" in printout[-1]["content"]
    # The client resends what it saw: the log holds exactly that, so nothing is rewritten.
    history += [{"role": "assistant", "content": shown}, {"role": "user", "content": "thanks"}]
    again = client.chat.completions.create(model="gpt-test", messages=history)
    scroll = again.to_dict()["scroll"]
    assert scroll["rewritten"] is False and scroll["appended"] == 1  # only "thanks"


def test_client_tool_calls_stream_after_the_text_whole_and_untouched(gateway, upstream):
    call = tool_call("get_weather", {"city": "Paris"}, "call_w1")
    upstream.then(completion(f"Checking the weather.\n{HEADLINE}", [call]))
    client = oa(gateway, make_key(upstream))
    with client.chat.completions.stream(
        model="gpt-test", messages=[{"role": "user", "content": "Paris?"}], tools=[WEATHER]
    ) as stream:
        final = stream.get_final_completion()
    message = final.choices[0].message
    assert message.content == "Checking the weather."
    assert final.choices[0].finish_reason == "tool_calls"
    assert [(c.id, c.function.name, c.function.arguments) for c in message.tool_calls] == [
        ("call_w1", "get_weather", '{"city": "Paris"}')
    ]


def _stream_calls(client, messages, reply, **kw) -> tuple[str, list[tuple[Any, ...]], str]:
    """Stream a completion; the first piece of a call's arguments lets ``reply`` (parked
    mid-call) go on, after checking it is still parked. Returns the text, each call as
    (index, id, name, its arguments put together) and the finish reason."""
    text, calls, finish = "", {}, None
    for chunk in client.chat.completions.create(
        model="gpt-test", messages=messages, stream=True, **kw
    ):
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        text += delta.content or ""
        for piece in delta.tool_calls or []:
            call = calls.setdefault(piece.index, [piece.index, piece.id, None, ""])
            call[2] = call[2] or (piece.function.name if piece.function else None)
            call[3] += (piece.function.arguments if piece.function else None) or ""
            if call[3] and reply.hold is not None and not reply.hold.is_set():
                assert not reply.done.is_set()  # the upstream is parked mid-call
                reply.hold.set()
        finish = chunk.choices[0].finish_reason or finish
    return text, [tuple(c) for _, c in sorted(calls.items())], finish


def test_a_client_tool_call_streams_its_arguments_as_the_upstream_writes_them(gateway, upstream):
    call = tool_call("write_file", {"path": "notes.txt", "content": NOTES}, "call_w1")
    reply = completion(f"Writing the file.\n{HEADLINE}", [call])
    # The upstream parks after the first piece of the call's arguments.
    reply.hold, reply.hold_on, reply.hold_after = threading.Event(), "arguments", 1
    upstream.then(reply, text("Done."))
    client = oa(gateway, make_key(upstream))
    history: list[dict[str, Any]] = [{"role": "user", "content": "save my notes"}]
    shown, calls, finish = _stream_calls(client, history, reply, tools=[WRITE])
    assert reply.hold.is_set()  # part of the arguments arrived before the end
    assert shown == "Writing the file."  # the headline held back, never sent
    [(index, call_id, name, arguments)] = calls
    assert (index, call_id, name) == (0, "call_w1", "write_file")
    assert json.loads(arguments) == {"path": "notes.txt", "content": NOTES}
    assert finish == "tool_calls"
    # The client sends the call back with its result: only the result is new.
    history += [
        {"role": "assistant", "content": shown, "tool_calls": [
            {"id": call_id, "type": "function",
             "function": {"name": name, "arguments": arguments}}]},
        {"role": "tool", "tool_call_id": call_id, "content": "written"},
    ]  # fmt: skip
    again = client.chat.completions.create(model="gpt-test", messages=history, tools=[WRITE])
    assert again.choices[0].message.content == "Done."
    scroll = again.to_dict()["scroll"]
    assert scroll["rewritten"] is False and scroll["appended"] == 1
    assert upstream.requests[1]["messages"][-1]["tool_call_id"] == "call_w1"


def test_two_client_calls_stream_one_after_the_other_in_the_replys_order(gateway, upstream):
    first = tool_call("get_weather", {"city": "Paris"}, "call_p")
    second = tool_call("get_weather", {"city": "Oslo"}, "call_o")
    upstream.then(completion(f"Both.\n{HEADLINE}", [first, second]))
    upstream.then(completion(f"Both.\n{HEADLINE}", [first, second]))
    client = oa(gateway, make_key(upstream))
    _, calls, finish = _stream_calls(
        client, [{"role": "user", "content": "Paris and Oslo?"}], completion(), tools=[WEATHER]
    )
    assert [(i, c, n, json.loads(a)) for i, c, n, a in calls] == [
        (0, "call_p", "get_weather", {"city": "Paris"}),
        (1, "call_o", "get_weather", {"city": "Oslo"}),
    ]
    assert finish == "tool_calls"
    # The same reply asked for without streaming: the same calls in the same order (under
    # fresh ids: the agent's log already holds these).
    whole = client.chat.completions.create(
        model="gpt-test", messages=[{"role": "user", "content": "Paris and Oslo? (whole)"}],
        tools=[WEATHER], extra_headers={"X-Scroll-Session": "whole"},
    )  # fmt: skip
    assert [(c.function.name, json.loads(c.function.arguments))
            for c in whole.choices[0].message.tool_calls] == [
        (n, json.loads(a)) for _, _, n, a in calls]  # fmt: skip


def test_an_openai_client_gets_an_anthropic_upstreams_call_as_it_is_written(gateway, upstream):
    reply = a_message(
        [
            {"type": "text", "text": f"Writing the file.\n{HEADLINE}"},
            a_tool_use("write_file", {"path": "notes.txt", "content": NOTES}, "toolu_w1"),
        ]
    )
    reply.hold, reply.hold_on, reply.hold_after = threading.Event(), "input_json_delta", 1
    upstream.then(reply)
    key = make_key(upstream, upstream_format="anthropic", upstream_base_url=upstream.root,
                   model_map={"*": "claude-upstream"})  # fmt: skip
    client = oa(gateway, key)
    shown, calls, finish = _stream_calls(
        client, [{"role": "user", "content": "save my notes"}], reply, tools=[WRITE]
    )
    assert reply.hold.is_set() and shown == "Writing the file."
    [(index, call_id, name, arguments)] = calls
    assert (index, call_id, name) == (0, "toolu_w1", "write_file")
    assert json.loads(arguments) == {"path": "notes.txt", "content": NOTES}
    assert finish == "tool_calls"


def test_an_anthropic_client_gets_a_chat_upstreams_call_as_it_is_written(gateway, upstream):
    call = tool_call("write_file", {"path": "notes.txt", "content": NOTES}, "call_w1")
    reply = completion(f"Writing the file.\n{HEADLINE}", [call])
    reply.hold, reply.hold_on, reply.hold_after = threading.Event(), "arguments", 1
    upstream.then(reply)
    client = an(gateway, make_key(upstream))
    write = {"name": "write_file", "input_schema": {"type": "object"}}
    with client.messages.stream(
        model="claude-test", max_tokens=100, tools=[write],
        messages=[{"role": "user", "content": "save my notes"}],
    ) as stream:  # fmt: skip
        kinds = []
        for event in stream:
            kinds.append(event.type)
            if event.type == "input_json" and not reply.hold.is_set():
                assert not reply.done.is_set()  # the upstream is parked mid-call
                assert "notes.txt" in event.partial_json
                reply.hold.set()
        final = stream.get_final_message()
    assert reply.hold.is_set()
    said, used = final.content
    assert said.text == "Writing the file."
    assert (used.id, used.name, used.input) == (
        "call_w1",
        "write_file",
        {"path": "notes.txt", "content": NOTES},
    )
    assert final.stop_reason == "tool_use"


def test_the_anthropic_client_gets_text_while_the_upstream_is_still_writing(gateway, upstream):
    reply = _held(text(ANSWER))
    upstream.then(reply)
    client = an(gateway, make_key(upstream))
    got, early = [], None
    with client.messages.stream(
        model="claude-test", max_tokens=100, messages=[{"role": "user", "content": "pangram"}]
    ) as stream:
        for piece in stream.text_stream:
            got.append(piece)
            if early is None:
                assert not reply.done.is_set()
                early = piece
                reply.hold.set()
        final = stream.get_final_message()
    assert "".join(got) == ANSWER and final.content[0].text == ANSWER
    assert final.stop_reason == "end_turn"
    assert final.usage.input_tokens == 120 and final.usage.output_tokens == 12


def test_an_upstream_that_fails_before_any_text_gets_its_status_and_after_an_error_event(
    gateway, upstream
):
    client = oa(gateway, make_key(upstream))

    upstream.then(error(429, "slow down", "rate_limit"))
    with pytest.raises(openai.RateLimitError):
        client.chat.completions.create(
            model="gpt-test", messages=[{"role": "user", "content": "a"}], stream=True
        )
    dying = text(ANSWER)
    dying.cut_after = 2
    upstream.then(dying)
    got = []
    with pytest.raises(openai.APIError) as caught:
        for chunk in client.chat.completions.create(
            model="gpt-test", messages=[{"role": "user", "content": "b"}], stream=True
        ):
            got.append(chunk.choices[0].delta.content or "")
    assert "ended before the reply did" in str(caught.value)
    assert ANSWER.startswith("".join(got)) and "".join(got)  # what came before stands
