"""Tool calls as they stream. A Chat Completions upstream's: ``upstream._assembled`` hands
each call to ``on_block`` as a ``tool_use`` block (opened when its arguments begin, one
``input_json_delta`` per piece, closed when the next call opens or the reply ends), the
reply it returns is the same as without ``on_block``, and a stream that goes back to a call
after the next one began is refused with a clear error instead of passed on cut. To an
OpenAI client: ``ChunkStream.block`` turns those blocks into ``tool_calls`` deltas, and a
call that closes without arguments gets ``{}``, as the whole call would."""

from __future__ import annotations

import json
from typing import Any

import pytest

from scroll_core.errors import ModelError
from scroll_core.gateway._types import ClientReply, GatewayStats
from scroll_core.gateway.openai_api import ChunkStream
from scroll_core.gateway.upstream import _assembled
from scroll_core.models.base import ToolCall, Usage


def _chunk(delta: dict[str, Any], finish: str | None = None) -> str:
    body = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "up",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}  # fmt: skip
    return "data: " + json.dumps(body)


def _head(index: int, call_id: str | None, name: str) -> str:
    item: dict[str, Any] = {"index": index, "type": "function",
                            "function": {"name": name, "arguments": ""}}  # fmt: skip
    if call_id is not None:
        item["id"] = call_id
    return _chunk({"tool_calls": [item]})


def _args(index: int, piece: str) -> str:
    return _chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})


def _run(lines: list[str]) -> tuple[Any, list[tuple[str, dict[str, Any] | None]]]:
    blocks: list[tuple[str, dict[str, Any] | None]] = []
    reply = _assembled(iter(lines), "up", lambda _: None, lambda k, p: blocks.append((k, p)))
    return reply, blocks


def _delta(piece: str) -> tuple[str, dict[str, Any]]:
    return ("delta", {"type": "input_json_delta", "partial_json": piece})


def test_each_call_opens_with_its_arguments_streams_them_and_closes_when_the_next_opens():
    lines = [
        _chunk({"role": "assistant", "content": "Two files."}),
        _head(0, "call_a", "write"),
        _args(0, '{"path": '),
        _args(0, '"a.txt"}'),
        _head(1, "call_b", "write"),
        _args(1, '{"path": "b.txt"}'),
        _chunk({}, "tool_calls"),
        "data: [DONE]",
    ]
    reply, blocks = _run(lines)
    tool = {"type": "tool_use", "name": "write", "input": {}}
    assert blocks == [
        ("start", {**tool, "id": "call_a"}),
        _delta('{"path": '),
        _delta('"a.txt"}'),
        ("stop", None),
        ("start", {**tool, "id": "call_b"}),
        _delta('{"path": "b.txt"}'),
        ("stop", None),
    ]
    # The reply is the one the stream makes without on_block.
    plain = _assembled(iter(lines), "up", lambda _: None)
    assert reply == plain
    assert [(c.id, c.arguments) for c in reply.tool_calls] == [
        ("call_a", {"path": "a.txt"}),
        ("call_b", {"path": "b.txt"}),
    ]


def test_a_call_without_arguments_or_id_opens_at_the_end_under_the_id_the_reply_gives_it():
    lines = [_head(0, None, "now"), _chunk({}, "tool_calls"), "data: [DONE]"]
    reply, blocks = _run(lines)
    assert [c.id for c in reply.tool_calls] == ["call_0"]
    assert blocks == [
        ("start", {"type": "tool_use", "id": "call_0", "name": "now", "input": {}}),
        ("stop", None),
    ]


def test_a_call_whose_first_piece_carries_its_arguments_opens_with_them():
    head = {"index": 0, "id": "call_x", "type": "function",
            "function": {"name": "look", "arguments": '{"q": 1}'}}  # fmt: skip
    reply, blocks = _run([_chunk({"tool_calls": [head]}), _chunk({}, "tool_calls"), "data: [DONE]"])
    assert blocks == [
        ("start", {"type": "tool_use", "id": "call_x", "name": "look", "input": {}}),
        _delta('{"q": 1}'),
        ("stop", None),
    ]
    assert reply.tool_calls[0].arguments == {"q": 1}


def test_a_stream_that_goes_back_to_a_closed_call_is_refused_by_name():
    lines = [
        _head(0, "call_a", "write"),
        _args(0, '{"path": '),
        _head(1, "call_b", "write"),
        _args(1, '{"path": "b.txt"}'),
        _args(0, '"a.txt"}'),
        _chunk({}, "tool_calls"),
        "data: [DONE]",
    ]
    with pytest.raises(ModelError, match="more of tool call 0 after the next call began") as err:
        _run(lines)
    assert err.value.status == 502
    # Without on_block nothing was handed over cut, so the same stream still adds up.
    plain = _assembled(iter(lines), "up", lambda _: None)
    assert [c.arguments for c in plain.tool_calls] == [{"path": "a.txt"}, {"path": "b.txt"}]


def _arguments_of(chunks: list[dict[str, Any]]) -> dict[int, str]:
    out: dict[int, str] = {}
    for chunk in chunks:
        for choice in chunk["choices"]:
            for call in choice["delta"].get("tool_calls") or ():
                out[call["index"]] = out.get(call["index"], "") + call["function"]["arguments"]
    return out


def test_an_openai_client_gets_each_streamed_calls_arguments_and_an_empty_object_for_none():
    chunks = ChunkStream("m")
    sent: list[dict[str, Any]] = []
    for kind, part in [
        ("start", {"type": "tool_use", "id": "a", "name": "now", "input": {}}),
        ("stop", None),  # a call without arguments: the whole-call form is "{}"
        ("start", {"type": "tool_use", "id": "b", "name": "look", "input": {}}),
        _delta('{"q": '),
        _delta("1}"),
        ("stop", None),
        ("start", {"type": "thinking", "thinking": "", "signature": ""}),  # no place in a chunk
        ("delta", {"type": "thinking_delta", "thinking": "hm"}),
        ("stop", None),
    ]:
        sent += chunks.block(kind, part)
    reply = ClientReply(
        content="",
        tool_calls=(ToolCall("a", "now"), ToolCall("b", "look", {"q": 1}), ToolCall("c", "x")),
        usage=Usage(),
        finish_reason="tool_calls",
        model="m",
        stats=GatewayStats(),
    )
    sent += chunks.end(reply)
    assert _arguments_of(sent) == {0: "{}", 1: '{"q": 1}', 2: "{}"}  # "c" whole, at the end
    heads = [c for chunk in sent for c in chunk["choices"][0]["delta"].get("tool_calls", ())
             if chunk["choices"] and "id" in c]  # fmt: skip
    assert [(h["index"], h["id"]) for h in heads] == [(0, "a"), (1, "b"), (2, "c")]
