"""Streaming through the gateway: the upstream's text reaches the client as it is written
(explicit markers: the scripted upstream holds mid-reply until the test lets it go), recall
steps run inside the stream without their calls ever reaching the client, and what the client
saw is what the log records."""

from __future__ import annotations

import threading

import openai
import pytest
from gateway_clients import WEATHER, an, make_key, oa
from gateway_upstream import HEADLINE, completion, error, text, tool_call

from scroll_core.prompts import RECALL_TOOL

pytestmark = pytest.mark.django_db(transaction=True)

ANSWER = "The quick brown fox jumps over the lazy dog."


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
