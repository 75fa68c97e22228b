"""An Anthropic client that streams and asked for extended thinking gets the thinking as the
upstream writes it: daphne on loopback, the official ``anthropic`` client reading the stream
(its parser checks every event: a delta for a block it was not told of, or a block never
closed, fails there), a scripted Anthropic upstream that streams and parks mid-reply on
explicit markers.

What is checked: thinking reaches the client while the upstream is still writing; the
headline is still held back from the text that follows it; a recall step's thinking and
text stream too, its text closed off by the answer's thinking block, and the client
sending all of it back appends nothing; a redacted block passes whole; a retry is answered
from the log in the same shape."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from anthropic_schema import assert_valid_request
from gateway_clients import an, make_key
from gateway_upstream import HEADLINE, a_message, a_thinking, a_tool_use

from dashboard.eventlog import get_event_log
from scroll_core.prompts import RECALL_TOOL
from scroll_core.store import KIND_MODEL_TURN

pytestmark = pytest.mark.django_db(transaction=True)

THINK = {"type": "enabled", "budget_tokens": 1024}


def _key(upstream):
    return make_key(
        upstream,
        upstream_format="anthropic",
        upstream_base_url=upstream.root,
        model_map={"*": "claude-upstream"},
    )


def _ask(session: str) -> dict[str, Any]:
    return {"model": "claude-x", "max_tokens": 2048, "thinking": THINK,
            "extra_headers": {"X-Scroll-Session": session}}  # fmt: skip


def _blocks(events: list[Any]) -> list[tuple[int, str]]:
    """(index, type) of each block as the stream opened it; every block closed in order."""
    opened, closed = [], []
    for event in events:
        if event.type == "content_block_start":
            opened.append((event.index, event.content_block.type))
        elif event.type == "content_block_stop":
            closed.append(event.index)
    assert [i for i, _ in opened] == list(range(len(opened))) == closed
    return opened


def test_thinking_reaches_the_client_while_the_upstream_still_writes(gateway, upstream):
    said = {"type": "text", "text": f"Yes.\n{HEADLINE}"}
    reply = a_message([a_thinking("Let me think it over.", "sig-1"), said])
    # The upstream parks before the thinking block's signature: its thinking went out.
    reply.hold, reply.hold_on, reply.hold_after = threading.Event(), "signature_delta", 0
    upstream.then(reply)
    client = an(gateway, _key(upstream))
    events = []
    with client.messages.stream(
        messages=[{"role": "user", "content": "well?"}], **_ask("live")
    ) as stream:
        for event in stream:
            events.append(event)
            if event.type == "thinking":
                assert event.thinking == "Let me think it over."
                assert not reply.done.is_set()  # the upstream is parked mid-reply
                reply.hold.set()
        final = stream.get_final_message()
    assert reply.hold.is_set()  # the thinking did arrive before the end
    assert _blocks(events) == [(0, "thinking"), (1, "text")]
    assert (final.content[0].thinking, final.content[0].signature) == (
        "Let me think it over.",
        "sig-1",
    )
    assert final.content[1].text == "Yes."  # the headline held back, never sent
    assert upstream.requests[0]["stream"] is True and upstream.requests[0]["thinking"] == THINK
    assert_valid_request(upstream.requests[0])
    # The reply is committed once the answer has left, the session still held: a retry
    # waits for that, and is answered from the log.
    retried = client.messages.create(
        messages=[{"role": "user", "content": "well?"}], **_ask("live")
    )
    assert [b.type for b in retried.content] == ["thinking", "text"] and len(upstream.requests) == 1
    logged = [
        e
        for e in get_event_log().session_events("gw:alice:live", limit=None)
        if e.kind == KIND_MODEL_TURN and e.role == "assistant"
    ]
    assert [e.content for e in logged] == ["Yes."]
    assert logged[0].headline and "gateway test" in logged[0].headline
    assert logged[0].metadata["thinking"] == [a_thinking("Let me think it over.", "sig-1")]


def test_a_recall_steps_thinking_and_text_stream_and_the_resent_turn_appends_nothing(
    gateway, upstream
):
    code = "print('the number is', 41)"
    upstream.then(
        a_message(
            [
                a_thinking("I should look it up.", "sig-a"),
                {"type": "text", "text": f"Looking it up.\n{HEADLINE}"},
                a_tool_use(RECALL_TOOL, {"code": code}, "toolu_r1"),
            ]
        ),
        a_message(
            [
                a_thinking("Found it.", "sig-b"),
                {"type": "redacted_thinking", "data": "opaque-bytes"},
                {"type": "text", "text": f"It is 41.\n{HEADLINE}"},
            ]
        ),
        a_message([{"type": "text", "text": f"Welcome.\n{HEADLINE}"}]),
    )
    client = an(gateway, _key(upstream))
    messages: list[dict[str, Any]] = [{"role": "user", "content": "what was the number?"}]
    events = []
    with client.messages.stream(messages=messages, **_ask("steps")) as stream:
        events = list(stream)
        final = stream.get_final_message()
    kinds = ["thinking", "text", "thinking", "redacted_thinking", "text"]
    assert [t for _, t in _blocks(events)] == kinds
    content = final.content
    assert (content[0].thinking, content[2].thinking) == ("I should look it up.", "Found it.")
    assert content[3].data == "opaque-bytes"
    # The step's text, then the answer's in a new block; with the newline a client puts
    # between a turn's text blocks, the blank line the gateway joins them with.
    assert (content[1].text, content[4].text) == ("Looking it up.", "\nIt is 41.")
    # The recall ran: its printout reached the upstream.
    second = upstream.requests[1]
    assert_valid_request(second)
    assert "the number is 41" in str(second["messages"][-1]["content"])

    # A retry is answered from the log: the answer's thinking, then all the text shown,
    # streamed or not.
    retried = client.messages.create(messages=messages, **_ask("steps"))
    with client.messages.stream(messages=messages, **_ask("steps")) as stream:
        replayed = stream.get_final_message()
    for again in (retried, replayed):
        assert [b.type for b in again.content] == ["thinking", "redacted_thinking", "text"]
        assert again.content[0].signature == "sig-b"
        assert again.content[2].text == "Looking it up.\n\nIt is 41."
    assert len(upstream.requests) == 2

    # The client sends back every block it got: nothing is appended twice, nothing rewritten.
    messages += [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in content]},
        {"role": "user", "content": "thanks"},
    ]
    assert client.messages.create(messages=messages, **_ask("steps")).content[-1].text == (
        "Welcome."
    )
    third = upstream.requests[2]
    assert_valid_request(third)
    log = get_event_log().session_events("gw:alice:steps", limit=None)
    said = [(e.role, e.content) for e in log if e.role in ("user", "assistant") and e.content]
    assert said.count(("user", "what was the number?")) == 1
    assert said.count(("user", "thanks")) == 1
    assert not any(e.metadata.get("gw") == "rewrite" for e in log)
    # The answer went back upstream with its own thinking blocks first, as they came.
    answer = third["messages"][-2]
    assert [b["type"] for b in answer["content"]][:2] == ["thinking", "redacted_thinking"]


def test_a_client_tool_call_streams_its_input_as_the_upstream_writes_it(gateway, upstream):
    content = "line\n" * 40
    reply = a_message(
        [
            {"type": "text", "text": f"Writing the file.\n{HEADLINE}"},
            a_tool_use("Write", {"path": "notes.txt", "content": content}, "toolu_w1"),
        ]
    )
    # The upstream parks after the first half of the call's input.
    reply.hold, reply.hold_on, reply.hold_after = threading.Event(), "input_json_delta", 1
    upstream.then(reply, a_message([{"type": "text", "text": f"Done.\n{HEADLINE}"}]))
    client = an(gateway, _key(upstream))
    write = {"name": "Write", "input_schema": {"type": "object"}}
    messages: list[dict[str, Any]] = [{"role": "user", "content": "save my notes"}]
    ask = {**_ask("write"), "tools": [write]}
    events = []
    with client.messages.stream(messages=messages, **ask) as stream:
        for event in stream:
            events.append(event)
            if event.type == "input_json" and not reply.hold.is_set():
                assert not reply.done.is_set()  # the upstream is parked mid-call
                assert "notes.txt" in event.partial_json
                reply.hold.set()
        final = stream.get_final_message()
    assert reply.hold.is_set()  # part of the input arrived before the end
    assert _blocks(events) == [(0, "text"), (1, "tool_use")]
    text, call = final.content
    assert text.text == "Writing the file."  # the headline held back, never sent
    assert (call.id, call.name, call.input) == (
        "toolu_w1",
        "Write",
        {"path": "notes.txt", "content": content},
    )
    assert final.stop_reason == "tool_use"
    # The client's result comes back on its next request: paired with its call, nothing
    # appended twice, nothing rewritten.
    messages += [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in final.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_w1",
                                      "content": "written"}]},
    ]  # fmt: skip
    assert client.messages.create(messages=messages, **ask).content[-1].text == "Done."
    second = upstream.requests[1]
    assert_valid_request(second)
    assert second["messages"][-1]["content"][0]["tool_use_id"] == "toolu_w1"
    log = get_event_log().session_events("gw:alice:write", limit=None)
    assert not any(e.metadata.get("gw") == "rewrite" for e in log)
    assert [e.content for e in log if e.role == "user" and e.content] == ["save my notes"]
