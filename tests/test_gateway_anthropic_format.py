"""The Anthropic upstream format without a server: the view as a Messages request (valid by
the ``anthropic`` package's types whatever the history holds), a reply and an event stream
read back, and the malformed cases as clear errors."""

from __future__ import annotations

import json

import pydantic
import pytest
from anthropic_schema import assert_valid_request, blocks_of
from gateway_upstream import message_events

from bench._gateway_data import claude_code_messages, completion_for, locomo_exchanges
from scroll_core.errors import ConfigError, ModelError
from scroll_core.gateway import (
    AnthropicUpstream,
    GatewayConversation,
    HttpUpstream,
    http_upstream,
    parse_chat_request,
    parse_messages_request,
)
from scroll_core.gateway.anthropic_upstream import assemble_stream, messages_body, parse_message
from scroll_core.gateway.upstream import parse_completion
from scroll_core.models import ModelReply
from scroll_core.profile import Profile
from scroll_core.prompts import RECALL_TOOL, recall_tool_definition
from scroll_core.store import EventLog
from scroll_core.tokens import CharRatioCounter


def _call(call_id: str, name: str, args: dict) -> dict:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }


def _lines(events: list[tuple[str, dict]]) -> list[str]:
    out = []
    for name, data in events:
        out += [f"event: {name}", f"data: {json.dumps(data)}", ""]
    return out


def test_the_schema_check_itself_refuses_a_malformed_request():
    good = messages_body([{"role": "user", "content": "hi"}], [], model="m", params={})
    assert_valid_request(good)
    for bad in (
        {**good, "temperature": 0.5},  # not in the published schema
        {**good, "max_tokens": "many"},
        {**good, "messages": [{"role": "user", "content": [{"type": "tool_result"}]}]},
        {**good, "messages": [{"role": "user", "content": [{"type": "text", "text": " "}]}]},
    ):
        with pytest.raises((AssertionError, pydantic.ValidationError)):
            assert_valid_request(bad)


def test_recall_and_client_results_share_one_user_turn_results_first():
    view = [
        {"role": "system", "content": "You help.\n\nrubric"},
        {"role": "user", "content": "weather, and what did I say?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                _call("toolu_r", RECALL_TOOL, {"code": "print(1)"}),
                _call("call_w", "get_weather", {"city": "Oslo"}),
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_r", "content": "1"},
        {"role": "tool", "tool_call_id": "call_w", "content": "snow"},
        {"role": "user", "content": "thanks"},
    ]
    tools = [recall_tool_definition()]
    body = messages_body(view, tools, model="claude", params={"max_tokens": 77}, stream=True)
    assert_valid_request(body)
    assert body["system"][0]["text"] == "You help.\n\nrubric" and body["max_tokens"] == 77
    assert body["stream"] is True and body["tools"][0]["name"] == RECALL_TOOL
    assistant, results = body["messages"][1], body["messages"][2]
    assert [b["type"] for b in assistant["content"]] == ["tool_use", "tool_use"]  # no empty text
    assert [b.get("tool_use_id") or b["text"] for b in results["content"]] == [
        "toolu_r",
        "call_w",
        "thanks",
    ]


def test_an_odd_history_still_makes_a_valid_request_and_loses_no_text():
    view = [
        {"role": "system", "content": "sys"},
        {"role": "assistant", "content": "I start."},  # the tail after an eviction
        {"role": "tool", "tool_call_id": "gone", "content": "a result whose call was evicted"},
        {"role": "system", "content": "mid-conversation note"},
        {
            "role": "assistant",
            "content": "calling",
            "tool_calls": [_call("call:1/x", "get_weather", {"city": "Rome"})],
        },
        {"role": "user", "content": "never mind"},  # the call's result never came
        {
            "role": "assistant",
            "content": "ok",
            "tool_calls": [_call("call:2/y", "get_weather", {"city": "Oslo"})],
        },
        {"role": "tool", "tool_call_id": "stale", "content": "an answer to nothing"},
        {"role": "tool", "tool_call_id": "call:2/y", "content": ""},
    ]
    params = {"stop": "END", "parallel_tool_calls": False}
    body = messages_body(view, [], model="m", params=params, cache=False)
    assert_valid_request(body)
    text = json.dumps(body["messages"])
    kept_texts = (
        "I start.",
        "a result whose call was evicted",
        "mid-conversation note",
        "Rome",
        "an answer to nothing",
    )
    for kept in kept_texts:
        assert kept in text
    assert body["messages"][0]["role"] == "user"
    last_call = body["messages"][-2]["content"][-1]
    assert last_call["id"] == "call_2_y" and body["messages"][-1]["content"][0] == {
        "type": "tool_result",
        "tool_use_id": "call_2_y",
    }
    assert body["stop_sequences"] == ["END"] and "tool_choice" not in body  # no tools offered


def test_tool_choice_and_parallel_calls_map_to_anthropics_form():
    tools = [recall_tool_definition()]
    user = [{"role": "user", "content": "x"}]

    def choice(**params):
        return messages_body(user, tools, model="m", params=params).get("tool_choice")

    assert choice() is None
    assert choice(tool_choice="required") == {"type": "any"}
    assert choice(tool_choice="none") == {"type": "none"}
    named = {"type": "function", "function": {"name": RECALL_TOOL}}
    assert choice(tool_choice=named) == {"type": "tool", "name": RECALL_TOOL}
    assert choice(parallel_tool_calls=False) == {"type": "auto", "disable_parallel_tool_use": True}


def test_a_message_reads_back_with_its_stop_reason_and_all_its_input_tokens():
    data = {
        "type": "message",
        "model": "claude-up",
        "stop_reason": "max_tokens",
        "content": [
            {"type": "thinking", "thinking": "hm", "signature": "s"},
            {"type": "text", "text": "Part one, "},
            {"type": "text", "text": "two."},
            {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": 1}},
        ],
        "usage": {
            "input_tokens": 10,
            "cache_read_input_tokens": 90,
            "cache_creation_input_tokens": 5,
            "output_tokens": 7,
        },
    }
    reply = parse_message(data, "m")
    assert reply.content == "Part one, two." and reply.finish_reason == "length"
    assert [(c.id, c.name, c.arguments) for c in reply.tool_calls] == [("toolu_1", "f", {"a": 1})]
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (105, 7)
    assert reply.model == "claude-up"
    refused = parse_message({**data, "stop_reason": "refusal", "content": []}, "m")
    assert refused.finish_reason == "content_filter"
    with pytest.raises(ModelError) as caught:
        parse_message({**data, "content": [{"type": "tool_use", "name": "f"}]}, "m")
    assert caught.value.status == 502 and "content.0.id" in str(caught.value)
    with pytest.raises(ModelError):
        parse_message({"choices": []}, "m")  # an OpenAI body from a misconfigured key


def test_an_event_stream_adds_up_to_the_same_reply_its_text_handed_over_live():
    body = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-up",
        "content": [
            {"type": "text", "text": "Let me check the weather for you."},
            {
                "type": "tool_use",
                "id": "toolu_9",
                "name": "get_weather",
                "input": {"city": "Lyon", "units": "C"},
            },
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 50, "output_tokens": 20},
    }
    events = message_events(body)
    thinking = {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "thinking_delta", "thinking": "private"},
    }
    events.insert(3, ("content_block_delta", thinking))
    pieces: list[str] = []
    reply = assemble_stream(iter(_lines(events)), "m", pieces.append)
    assert len(pieces) > 1 and "".join(pieces) == reply.content == body["content"][0]["text"]
    assert [(c.id, c.arguments) for c in reply.tool_calls] == [
        ("toolu_9", {"city": "Lyon", "units": "C"})
    ]
    assert reply.finish_reason == "tool_calls" and reply.model == "claude-up"
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (50, 20)
    assert parse_message(body, "m") == reply  # streamed or not, one reply


def test_a_stream_that_stops_early_or_sends_an_error_event_is_an_error():
    body = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "c",
        "content": [{"type": "text", "text": "cut short"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }
    events = message_events(body)
    with pytest.raises(ModelError) as caught:
        assemble_stream(iter(_lines(events[:-1])), "m", lambda _: None)
    assert caught.value.status == 502 and "ended before" in str(caught.value)
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Busy"}}
    with pytest.raises(ModelError) as caught:
        assemble_stream(iter(_lines([events[0], ("error", overloaded)])), "m", lambda _: None)
    assert (caught.value.status, caught.value.code, caught.value.message) == (
        529,
        "overloaded_error",
        "Busy",
    )
    with pytest.raises(ModelError):
        assemble_stream(iter(["data: {not json"]), "m", lambda _: None)


def test_a_keys_format_picks_the_upstream_and_an_unknown_one_is_refused():
    plain = http_upstream("openai", "http://h:1/v1")
    messages = http_upstream("anthropic", "https://api.example.com/v1/", api_key="k")
    try:
        assert type(plain) is HttpUpstream and plain.url == "http://h:1/v1/chat/completions"
        assert isinstance(messages, AnthropicUpstream)
        assert messages.url == "https://api.example.com/v1/messages"
        assert messages.headers()["x-api-key"] == "k" and "authorization" not in messages.headers()
    finally:
        plain.close()
        messages.close()
    with pytest.raises(ConfigError, match="gemini"):
        http_upstream("gemini", "http://h:1")


class _MessagesRecorder:
    """An in-process upstream that turns every view into the Messages request an
    Anthropic-format key would send, checks it, and answers from a queue."""

    def __init__(self) -> None:
        self.queue: list = []
        self.bodies: list[dict] = []

    def complete(self, messages, tools, *, model, params) -> ModelReply:
        body = messages_body(messages, tools, model=model, params=params)
        assert_valid_request(body)
        self.bodies.append(body)
        return parse_completion(self.queue.pop(0), model)


@pytest.mark.parametrize("name", ["representative_messages.jsonl", "todowrite_examples.jsonl"])
def test_every_view_of_a_claude_code_transcript_makes_a_valid_messages_request(
    tmp_path, shared_data, name
):
    transcript = claude_code_messages(shared_data / "claude-code" / name)
    names = sorted({b["name"] for m in transcript for b in m["content"] if b["type"] == "tool_use"})
    tools = [{"name": n, "description": n, "input_schema": {"type": "object"}} for n in names]
    upstream = _MessagesRecorder()
    history: list[dict] = []
    with EventLog(tmp_path / "log.sqlite3", token_counter=CharRatioCounter()) as log:
        conv = GatewayConversation(
            log, session_id="gw:cc", agent_id="cc", profile=Profile(context_size=8192)
        )
        for message in transcript:
            if message["role"] == "assistant":
                text = "\n".join(b["text"] for b in message["content"] if b["type"] == "text")
                calls = [
                    _call(b["id"], b["name"], b["input"])
                    for b in message["content"]
                    if b["type"] == "tool_use"
                ]
                upstream.queue.append(completion_for(text, calls))
                body = {
                    "model": "claude-x",
                    "max_tokens": 512,
                    "system": "You are Claude Code.",
                    "messages": history,
                    "tools": tools,
                }
                conv.handle(parse_messages_request(body), upstream, model="up")
            history.append(message)
    assert len(upstream.bodies) >= 3
    sent = [
        b["tool_use_id"]
        for body in upstream.bodies
        for m in body["messages"]
        for b in blocks_of(m)
        if b["type"] == "tool_result"
    ]
    assert sent  # tool results went up as tool_result blocks
    assert all(body["max_tokens"] == 512 for body in upstream.bodies)


def test_every_view_of_an_evicting_locomo_conversation_makes_a_valid_messages_request(
    tmp_path, shared_data
):
    exchanges = locomo_exchanges(shared_data / "locomo" / "locomo10.json", sessions=None)[:80]
    upstream = _MessagesRecorder()
    history: list[dict] = [{"role": "system", "content": "You are Melanie."}]
    evictions = 0
    with EventLog(tmp_path / "log.sqlite3", token_counter=CharRatioCounter()) as log:
        conv = GatewayConversation(
            log, session_id="gw:lc", agent_id="lc", profile=Profile(context_size=4096)
        )
        for said, answer in exchanges:
            history.append({"role": "user", "content": said})
            upstream.queue.append(completion_for(answer))
            reply = conv.handle(
                parse_chat_request({"model": "m", "messages": history}), upstream, model="up"
            )
            evictions += reply.stats.evictions
            history.append({"role": "assistant", "content": reply.content})
    assert evictions > 0  # views after evictions (index in front, the tail cut) were checked
    # The opening exchange was evicted: the last request no longer holds it.
    assert exchanges[0][0] not in json.dumps(upstream.bodies[-1]["messages"], ensure_ascii=False)
    assert exchanges[0][0] in json.dumps(upstream.bodies[0]["messages"], ensure_ascii=False)
