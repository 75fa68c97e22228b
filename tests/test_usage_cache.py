"""Prompt-cache counts in usage: read from each provider's own format (OpenAI's
``prompt_tokens_details.cached_tokens``, inside ``prompt_tokens``; Anthropic's
``cache_read_input_tokens`` / ``cache_creation_input_tokens``, outside ``input_tokens``), kept
as parts of ``Usage.input_tokens``, put on the ``chat`` span, logged with the reply and passed
back to each client in its own format."""

from __future__ import annotations

import json

import openai
import pytest
from gateway_clients import an, make_key, oa
from gateway_upstream import HEADLINE, a_message, completion, message_events, text

from dashboard.gateway.service import get_service
from scroll_core.gateway.anthropic_upstream import AnthropicUpstream, assemble_stream, parse_message
from scroll_core.gateway.upstream import HttpUpstream, parse_completion
from scroll_core.models import Usage
from scroll_core.models.openai_compat import chat_usage

# An OpenAI Chat Completions reply as the API sends it, a prompt cache hit in it.
OPENAI_COMPLETION = {
    "id": "chatcmpl-C1",
    "object": "chat.completion",
    "created": 1760000000,
    "model": "gpt-4o-2024-08-06",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Hi.", "refusal": None},
            "logprobs": None,
            "finish_reason": "stop",
        }
    ],
    "usage": {
        "prompt_tokens": 2006,
        "completion_tokens": 300,
        "total_tokens": 2306,
        "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
    },
    "service_tier": "default",
    "system_fingerprint": "fp_1",
}

# An Anthropic Messages reply that read 90 tokens from the cache and wrote 5 to it.
ANTHROPIC_MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5-20250929",
    "content": [{"type": "text", "text": "Hi."}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {
        "input_tokens": 10,
        "cache_creation_input_tokens": 5,
        "cache_read_input_tokens": 90,
        "output_tokens": 7,
        "service_tier": "standard",
    },
}


def _lines(events: list[tuple[str, dict]]) -> list[str]:
    out = []
    for name, data in events:
        out += [f"event: {name}", f"data: {json.dumps(data)}", ""]
    return out


# -- Usage ------------------------------------------------------------------------------------
def test_the_cache_counts_are_parts_of_input_tokens():
    used = Usage(input_tokens=1000, output_tokens=50, cache_read_input_tokens=600,
                 cache_creation_input_tokens=100)  # fmt: skip
    assert used.uncached_input_tokens == 300 and used.cache_reported
    plain = Usage(1000, 50)
    assert plain.uncached_input_tokens == 1000 and not plain.cache_reported


def test_summed_usage_keeps_a_cache_count_unreported_only_when_no_call_reported_it():
    total = Usage(100, 10) + Usage(200, 20, cache_read_input_tokens=150)
    assert total == Usage(300, 30, cache_read_input_tokens=150, cache_creation_input_tokens=None)
    assert (Usage(1, 1) + Usage(2, 2)).cache_read_input_tokens is None


# -- OpenAI Chat Completions ------------------------------------------------------------------
def test_an_openai_completion_keeps_its_cached_tokens_inside_its_prompt_tokens():
    reply = parse_completion(OPENAI_COMPLETION, "gpt-4o")
    assert reply.usage == Usage(2006, 300, cache_read_input_tokens=1920)
    assert reply.usage.uncached_input_tokens == 86


def test_a_server_that_leaves_the_details_out_reports_no_cache_counts():
    body = {**OPENAI_COMPLETION, "usage": {"prompt_tokens": 50, "completion_tokens": 5}}
    used = parse_completion(body, "local").usage
    assert used == Usage(50, 5) and not used.cache_reported


def test_the_openai_packages_usage_object_reads_the_same_as_its_json():
    parsed = openai.types.chat.ChatCompletion.model_validate(OPENAI_COMPLETION)
    assert chat_usage(parsed.usage) == chat_usage(OPENAI_COMPLETION["usage"])
    assert chat_usage(parsed.usage).cache_read_input_tokens == 1920


def test_a_streamed_completion_keeps_the_cached_tokens_of_its_usage_chunk(upstream):
    upstream.then(completion("streamed answer", prompt=2006, out=9, cached=1920))
    client = HttpUpstream(upstream.url)
    try:
        reply = client.complete([{"role": "user", "content": "hi"}], [], model="m", params={},
                                on_text=lambda _: None)  # fmt: skip
    finally:
        client.close()
    assert upstream.requests[0]["stream"] is True
    assert reply.content == "streamed answer"
    assert reply.usage == Usage(2006, 9, cache_read_input_tokens=1920)


# -- Anthropic Messages -----------------------------------------------------------------------
def test_an_anthropic_message_counts_the_cache_inside_input_tokens_and_apart():
    used = parse_message(ANTHROPIC_MESSAGE, "m").usage
    assert used == Usage(105, 7, cache_read_input_tokens=90, cache_creation_input_tokens=5)
    assert used.uncached_input_tokens == 10  # Anthropic's own input_tokens


def test_a_message_without_cache_fields_reports_no_cache_counts():
    body = {**ANTHROPIC_MESSAGE, "usage": {"input_tokens": 10, "output_tokens": 7}}
    assert parse_message(body, "m").usage == Usage(10, 7)


def test_a_message_stream_takes_the_cache_from_message_start_and_output_from_message_delta():
    events = message_events(ANTHROPIC_MESSAGE)
    start = events[0][1]["message"]["usage"]
    assert start["cache_read_input_tokens"] == 90 and start["output_tokens"] == 1
    assert events[-2][1]["usage"] == {"output_tokens": 7}
    reply = assemble_stream(iter(_lines(events)), "m", lambda _: None)
    assert reply.usage == parse_message(ANTHROPIC_MESSAGE, "m").usage


def test_a_message_delta_with_the_whole_usage_again_changes_nothing_it_repeats():
    events = message_events(ANTHROPIC_MESSAGE)
    name, delta = events[-2]
    events[-2] = (name, {**delta, "usage": dict(ANTHROPIC_MESSAGE["usage"])})
    reply = assemble_stream(iter(_lines(events)), "m", lambda _: None)
    assert reply.usage == Usage(105, 7, cache_read_input_tokens=90, cache_creation_input_tokens=5)


def test_an_anthropic_upstream_on_loopback_reads_the_cache_streamed_or_not(upstream):
    client = AnthropicUpstream(upstream.root)
    messages = [{"role": "user", "content": "hi"}]
    try:
        upstream.then(a_message([{"type": "text", "text": "whole"}], prompt=10, out=3,
                                cache_read=400, cache_write=60))  # fmt: skip
        whole = client.complete(messages, [], model="claude-up", params={})
        upstream.then(a_message([{"type": "text", "text": "streamed"}], prompt=10, out=3,
                                cache_read=400, cache_write=60))  # fmt: skip
        streamed = client.complete(messages, [], model="claude-up", params={},
                                   on_text=lambda _: None)  # fmt: skip
    finally:
        client.close()
    assert upstream.requests[1]["stream"] is True
    want = Usage(470, 3, cache_read_input_tokens=400, cache_creation_input_tokens=60)
    assert whole.usage == streamed.usage == want


# -- through the gateway ----------------------------------------------------------------------


def _logged_reply(console_log, session: str):
    get_service().flush()
    return next(
        e for e in console_log.session_events(session, limit=None)
        if e.metadata.get("gw") == "reply"
    )  # fmt: skip


@pytest.mark.django_db(transaction=True)
def test_the_openai_client_gets_the_cached_tokens_and_the_chat_span_has_them(
    gateway, upstream, console_log, ring
):
    upstream.then(completion(f"cached\n{HEADLINE}", prompt=2006, out=9, cached=1920))
    raw = oa(gateway, make_key(upstream)).chat.completions.with_raw_response.create(
        model="gpt-test", messages=[{"role": "user", "content": "hello"}]
    )
    answer = raw.parse()
    assert answer.usage.prompt_tokens == 2006
    assert answer.usage.prompt_tokens_details.cached_tokens == 1920
    (chat,) = ring.records("chat upstream-model")
    assert chat.attributes["gen_ai.usage.input_tokens"] == 2006
    assert chat.attributes["gen_ai.usage.cache_read.input_tokens"] == 1920
    assert "gen_ai.usage.cache_creation.input_tokens" not in chat.attributes  # not reported
    meta = _logged_reply(console_log, raw.headers["x-scroll-session"]).metadata
    assert (meta["input_tokens"], meta["cache_read_input_tokens"]) == (2006, 1920)
    assert meta["cache_creation_input_tokens"] == 0


@pytest.mark.django_db(transaction=True)
def test_without_cache_counts_the_client_and_the_log_get_none(gateway, upstream, console_log):
    upstream.then(text("plain"))
    raw = oa(gateway, make_key(upstream)).chat.completions.with_raw_response.create(
        model="gpt-test", messages=[{"role": "user", "content": "hello"}]
    )
    answer = raw.parse()
    assert answer.usage.prompt_tokens == 120 and answer.usage.prompt_tokens_details is None
    meta = _logged_reply(console_log, raw.headers["x-scroll-session"]).metadata
    assert "cache_read_input_tokens" not in meta


@pytest.mark.django_db(transaction=True)
def test_the_anthropic_client_gets_input_tokens_without_the_cache_from_an_openai_upstream(
    gateway, upstream
):
    upstream.then(completion(f"cached\n{HEADLINE}", prompt=2006, out=9, cached=1920))
    reply = an(gateway, make_key(upstream)).messages.create(
        model="gpt-test", max_tokens=100, messages=[{"role": "user", "content": "hello"}]
    )
    assert reply.usage.input_tokens == 86  # Anthropic's convention: the cache left out
    assert reply.usage.cache_read_input_tokens == 1920
    assert reply.usage.cache_creation_input_tokens == 0


@pytest.mark.django_db(transaction=True)
def test_an_anthropic_upstreams_cache_writes_reach_a_streaming_anthropic_client(
    gateway, upstream, ring
):
    upstream.then(a_message([{"type": "text", "text": f"hi\n{HEADLINE}"}], prompt=10, out=3,
                            cache_read=400, cache_write=60))  # fmt: skip
    key = make_key(upstream, upstream_format="anthropic", upstream_base_url=upstream.root,
                   model_map={"*": "claude-upstream"})  # fmt: skip
    with an(gateway, key).messages.stream(
        model="claude-x", max_tokens=100, messages=[{"role": "user", "content": "hello"}]
    ) as stream:
        final = stream.get_final_message()
    assert upstream.requests[0]["stream"] is True
    assert final.usage.input_tokens == 10
    assert final.usage.cache_read_input_tokens == 400
    assert final.usage.cache_creation_input_tokens == 60
    (chat,) = ring.records("chat claude-upstream")
    assert chat.attributes["gen_ai.usage.input_tokens"] == 470
    assert chat.attributes["gen_ai.usage.cache_creation.input_tokens"] == 60


@pytest.mark.django_db(transaction=True)
def test_a_responses_client_gets_the_cached_tokens_in_its_input_details(gateway, upstream):
    upstream.then(completion(f"cached\n{HEADLINE}", prompt=2006, out=9, cached=1920))
    response = oa(gateway, make_key(upstream)).responses.create(model="gpt-test", input="hi")
    assert response.usage.input_tokens == 2006
    assert response.usage.input_tokens_details.cached_tokens == 1920
