"""Keys whose upstream speaks Anthropic Messages: both official clients through the gateway
(daphne on loopback) to the scripted loopback upstream answering at ``/v1/messages``, every
request it received validated against the ``anthropic`` package's request types."""

from __future__ import annotations

import json
import threading
from typing import Any

import anthropic
import openai
import pytest
from anthropic_schema import assert_valid_request
from gateway_clients import WEATHER, an, ask, assistant_of, make_key, oa
from gateway_upstream import HEADLINE, a_error, a_message, a_text, a_tool_use

from scroll_core.prompts import HEADLINE_INSTRUCTION, RECALL_TOOL

pytestmark = pytest.mark.django_db(transaction=True)

WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Weather in a city.",
    "input_schema": WEATHER["function"]["parameters"],
}


def _bare(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Blocks without their prompt-cache breakpoint."""
    return [{k: v for k, v in b.items() if k != "cache_control"} for b in blocks]


def _key(upstream, **fields):
    fields.setdefault("model_map", {"*": "claude-upstream"})
    return make_key(
        upstream, upstream_format="anthropic", upstream_base_url=upstream.root, **fields
    )


# -- the anthropic client ---------------------------------------------------------------------
def test_the_anthropic_client_gets_a_message_from_an_anthropic_upstream(gateway, upstream):
    client = an(gateway, _key(upstream))
    reply = client.messages.create(
        model="claude-x",
        max_tokens=300,
        system="Be brief.",
        messages=[{"role": "user", "content": "hello"}],
    )
    assert [b.type for b in reply.content] == ["text"] and reply.content[0].text == "ok 1"
    assert reply.stop_reason == "end_turn"
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (120, 12)
    assert upstream.paths == ["/v1/messages"]
    headers = upstream.headers[0]
    assert headers["x-api-key"] == "sk-upstream-secret" and "authorization" not in headers
    assert headers["anthropic-version"] == "2023-06-01"
    sent = upstream.requests[0]
    assert_valid_request(sent)
    assert sent["model"] == "claude-upstream" and sent["max_tokens"] == 300
    assert "stream" not in sent
    (system,) = sent["system"]
    # Nothing evicted yet: the headline instruction, no rubric and no recall tool.
    assert system["text"] == f"Be brief.\n\n{HEADLINE_INSTRUCTION}"
    assert all(m["role"] != "system" for m in sent["messages"])
    # Prompt-cache breakpoints after the prefix and at the end of the view.
    ephemeral = {"type": "ephemeral"}
    assert system["cache_control"] == ephemeral
    assert sent["messages"][-1] == {
        "role": "user",
        "content": [{"type": "text", "text": "hello", "cache_control": ephemeral}],
    }
    assert "tools" not in sent


def test_the_anthropic_client_streams_text_as_the_upstream_writes_it(gateway, upstream):
    answer = "The quick brown fox jumps over the lazy dog."
    reply = a_text(answer)
    reply.hold, reply.hold_after = threading.Event(), 2
    upstream.then(reply)
    client = an(gateway, _key(upstream))
    got: list[str] = []
    with client.messages.stream(
        model="claude-x", max_tokens=100, messages=[{"role": "user", "content": "pangram"}]
    ) as stream:
        for piece in stream.text_stream:
            got.append(piece)
            if len(got) == 1:
                assert not reply.done.is_set()  # the upstream is parked mid-reply
                reply.hold.set()
        final = stream.get_final_message()
    assert "".join(got) == answer and final.content[0].text == answer  # no headline
    assert final.usage.input_tokens == 120 and final.stop_reason == "end_turn"
    assert upstream.requests[0]["stream"] is True
    assert_valid_request(upstream.requests[0])


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
def test_anthropic_client_tools_pass_through_an_anthropic_upstream_untouched(
    gateway, upstream, streamed
):
    client = an(gateway, _key(upstream))
    upstream.then(
        a_message(
            [
                {"type": "text", "text": f"Checking.\n{HEADLINE}"},
                a_tool_use("get_weather", {"city": "Oslo"}, "toolu_w1"),
            ]
        ),
        a_text("Snow in Oslo."),
    )
    messages: list[dict[str, Any]] = [{"role": "user", "content": "weather in Oslo?"}]
    ask_for = {
        "model": "claude-x",
        "max_tokens": 200,
        "messages": messages,
        "tools": [WEATHER_TOOL],
    }
    if streamed:
        with client.messages.stream(**ask_for) as stream:
            first = stream.get_final_message()
    else:
        first = client.messages.create(**ask_for)
    assert first.stop_reason == "tool_use"
    assert [b.model_dump(exclude_none=True) for b in first.content] == [
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "toolu_w1", "name": "get_weather", "input": {"city": "Oslo"}},
    ]
    assert upstream.requests[0]["tools"][0] == WEATHER_TOOL  # the client's tool, as it sent it
    assert [t["name"] for t in upstream.requests[0]["tools"]] == ["get_weather"]
    messages += [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_w1", "content": "snow, -3C"}],
        },
    ]
    reply = client.messages.create(**ask_for)
    assert reply.content[0].text == "Snow in Oslo." and reply.stop_reason == "end_turn"
    sent = upstream.requests[1]
    assert_valid_request(sent)
    assert sent["messages"][-2]["content"][-1] == {
        "type": "tool_use",
        "id": "toolu_w1",
        "name": "get_weather",
        "input": {"city": "Oslo"},
    }
    assert _bare(sent["messages"][-1]["content"]) == [
        {"type": "tool_result", "tool_use_id": "toolu_w1", "content": "snow, -3C"}
    ]


def test_a_recall_runs_in_the_kernel_and_its_printout_goes_back_as_a_tool_result(gateway, upstream):
    client = an(gateway, _key(upstream))
    messages: list[dict[str, Any]] = [{"role": "user", "content": "the code word is PELICAN"}]
    first = client.messages.create(model="claude-x", max_tokens=100, messages=messages)
    code = "print('evidence:', [h.snippet for h in ms.search('PELICAN', k=5)])"
    upstream.then(
        a_message([a_tool_use(RECALL_TOOL, {"code": code}, "toolu_r1")]),
        a_text("It was PELICAN."),
    )
    messages += [
        {"role": "assistant", "content": first.content[0].text},
        {"role": "user", "content": "what was the code word?"},
    ]
    with client.messages.stream(model="claude-x", max_tokens=100, messages=messages) as stream:
        reply = stream.get_final_message()
    assert [b.type for b in reply.content] == ["text"]  # the recall call stayed inside
    assert reply.content[0].text == "It was PELICAN."
    assert reply.usage.input_tokens == 240  # two upstream calls summed
    sent = upstream.requests[2]
    assert_valid_request(sent)
    call, result = sent["messages"][-2]["content"][-1], sent["messages"][-1]["content"][0]
    assert call == {
        "type": "tool_use",
        "id": "toolu_r1",
        "name": RECALL_TOOL,
        "input": {"code": code},
    }
    assert result["type"] == "tool_result" and result["tool_use_id"] == "toolu_r1"
    assert "evidence:" in result["content"] and "PELICAN" in result["content"]


def test_anthropic_upstream_errors_are_mapped_with_their_message_kept(gateway, upstream):
    key = _key(upstream)
    client = an(gateway, key)
    hello = [{"role": "user", "content": "hello"}]
    upstream.then(a_error(529, "overloaded_error", "Overloaded, try later"))
    with pytest.raises(anthropic.APIStatusError) as caught:
        client.messages.create(model="claude-x", max_tokens=50, messages=hello)
    assert caught.value.status_code == 529
    assert caught.value.body["error"]["type"] == "overloaded_error"
    assert "Overloaded, try later" in caught.value.body["error"]["message"]
    # The same overload as an error event in the upstream's stream, before any text.
    overloaded = a_text("never sent")
    overloaded.stream_error = {"type": "overloaded_error", "message": "Overloaded mid-stream"}
    upstream.then(overloaded)
    with (
        pytest.raises(anthropic.APIStatusError) as caught,
        client.messages.stream(model="claude-x", max_tokens=50, messages=hello) as stream,
    ):
        stream.get_final_message()
    assert caught.value.status_code == 529 and "Overloaded mid-stream" in str(caught.value)
    upstream.then(a_error(400, "invalid_request_error", "max_tokens: 50 > 32 for this model"))
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(model="claude-x", max_tokens=50, messages=hello)
    assert "max_tokens: 50 > 32 for this model" in caught.value.body["error"]["message"]
    # An OpenAI client of the same upstream gets the overload as its own 503.
    upstream.then(a_error(529, "overloaded_error", "Overloaded, try later"))
    with pytest.raises(openai.APIStatusError) as raised:
        ask(oa(gateway, key), hello)
    assert raised.value.status_code == 503 and "Overloaded, try later" in raised.value.message


def test_a_prompt_too_long_answer_forces_a_compress_and_one_retry(gateway, upstream):
    client = an(gateway, _key(upstream))
    upstream.then(
        a_error(400, "invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum"),
        a_text("Fits now."),
    )
    reply = client.messages.create(
        model="claude-x", max_tokens=50, messages=[{"role": "user", "content": "hi"}]
    )
    assert reply.content[0].text == "Fits now." and len(upstream.requests) == 2


# -- the openai client ------------------------------------------------------------------------
def test_the_openai_client_gets_text_from_an_anthropic_upstream(gateway, upstream):
    client = oa(gateway, _key(upstream))
    completion = ask(
        client,
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello"}],
        stop=["###"],
        temperature=0.3,
    )
    assert completion.choices[0].message.content == "ok 1"
    assert completion.choices[0].finish_reason == "stop"
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (120, 12)
    sent = upstream.requests[0]
    assert_valid_request(sent)
    assert sent["system"][0]["text"].startswith("Be brief.") and sent["stop_sequences"] == ["###"]
    assert sent["max_tokens"] == 4096  # the documented default: the client sent none
    assert "temperature" not in sent  # not in the Messages schema


def test_the_openai_clients_tool_calls_round_trip_through_an_anthropic_upstream(gateway, upstream):
    client = oa(gateway, _key(upstream))
    upstream.then(
        a_message([a_tool_use("get_weather", {"city": "Paris"}, "toolu_p1")]),
        a_text("Sunny in Paris."),
    )
    history: list[dict[str, Any]] = [{"role": "user", "content": "weather in Paris?"}]
    first = ask(client, history, tools=[WEATHER], tool_choice="required")
    message = first.choices[0].message
    assert first.choices[0].finish_reason == "tool_calls"
    assert [
        (c.id, c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls
    ] == [("toolu_p1", "get_weather", {"city": "Paris"})]
    assert upstream.requests[0]["tools"][0] == WEATHER_TOOL
    assert upstream.requests[0]["tool_choice"] == {"type": "any"}
    history += [
        assistant_of(first),
        {"role": "tool", "tool_call_id": "toolu_p1", "content": "sunny, 21C"},
    ]
    answer = ask(client, history, tools=[WEATHER])
    assert answer.choices[0].message.content == "Sunny in Paris."
    sent = upstream.requests[1]
    assert_valid_request(sent)
    assert _bare(sent["messages"][-1]["content"]) == [
        {"type": "tool_result", "tool_use_id": "toolu_p1", "content": "sunny, 21C"}
    ]


def test_the_openai_client_streams_from_an_anthropic_upstream(gateway, upstream):
    client = oa(gateway, _key(upstream))
    upstream.then(a_text("A fairly long answer " * 6))
    chunks = list(
        ask(
            client,
            [{"role": "user", "content": "talk"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    body = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert body == ("A fairly long answer " * 6).strip()
    assert chunks[-1].usage.prompt_tokens == 120 and chunks[-1].usage.completion_tokens == 12
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert upstream.requests[0]["stream"] is True
    assert_valid_request(upstream.requests[0])


def test_a_reply_mixing_a_recall_and_a_client_call_makes_a_valid_next_request(gateway, upstream):
    client = an(gateway, _key(upstream))
    code = "print('looked')"
    upstream.then(
        a_message(
            [
                a_tool_use(RECALL_TOOL, {"code": code}, "toolu_r2"),
                a_tool_use("get_weather", {"city": "Rome"}, "toolu_w2"),
            ]
        ),
        a_text("Warm in Rome."),
    )
    messages: list[dict[str, Any]] = [{"role": "user", "content": "weather in Rome?"}]
    ask_for = {
        "model": "claude-x",
        "max_tokens": 200,
        "messages": messages,
        "tools": [WEATHER_TOOL],
    }
    first = client.messages.create(**ask_for)
    assert [(b.type, b.id) for b in first.content] == [("tool_use", "toolu_w2")]  # only its own
    messages += [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_w2", "content": "warm"}],
        },
    ]
    assert client.messages.create(**ask_for).content[0].text == "Warm in Rome."
    sent = upstream.requests[1]
    assert_valid_request(sent)  # both calls in one turn, both results in the next
    calls, results = sent["messages"][-2]["content"], sent["messages"][-1]["content"]
    assert [b["id"] for b in calls if b["type"] == "tool_use"] == ["toolu_r2", "toolu_w2"]
    assert [(b["tool_use_id"], b["content"]) for b in results] == [
        ("toolu_r2", "looked"),
        ("toolu_w2", "warm"),
    ]
