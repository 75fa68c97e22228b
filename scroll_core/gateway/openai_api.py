"""OpenAI Chat Completions <-> the gateway's shapes: request parsing (a malformed body is a
``GatewayRequestInvalid`` naming the field), the reply, its stream chunks and error bodies.

Shapes follow the published API: ``chat.completion`` objects, ``chat.completion.chunk``
events ending in ``data: [DONE]``, tool calls streamed as index-keyed deltas (the id and name
first, then the arguments). The extension field ``scroll`` rides on the completion and on
the last chunk; the official client keeps unknown fields.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from ..errors import GatewayRequestInvalid
from ..models.base import ToolCall
from ._json import loads
from ._types import ClientMessage, ClientReply, ClientRequest

__all__ = [
    "ChunkStream",
    "chat_completion",
    "content_text",
    "error_body",
    "models_list",
    "parse_chat_request",
]

_ROLES = ("system", "developer", "user", "assistant", "tool", "function")
# Sampling options passed upstream unchanged (anything else the client sends is dropped).
PASSED_PARAMS = (
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "stop",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "tool_choice",
    "parallel_tool_calls",
    "response_format",
    "reasoning_effort",
)
_CHUNK_CHARS = 48


def _need(condition: bool, param: str, message: str) -> None:
    if not condition:
        raise GatewayRequestInvalid(param, message)


def content_text(content: Any, param: str, *, allow_none: bool = False) -> str:
    """A message's content as one text: a string, or content parts joined by lines (an
    image, audio or file part stands as ``[its type]``; an unknown type is refused)."""
    if content is None:
        _need(allow_none, param, "is required")
        return ""
    if isinstance(content, str):
        return content
    _need(isinstance(content, list), param, "must be a string or a list of content parts")
    parts: list[str] = []
    for j, part in enumerate(content):
        where = f"{param}.{j}"
        _need(isinstance(part, dict), where, "must be an object")
        kind = part.get("type")
        if kind in ("text", "input_text", "output_text"):
            _need(isinstance(part.get("text"), str), f"{where}.text", "must be a string")
            parts.append(part["text"])
        elif kind == "refusal":
            _need(isinstance(part.get("refusal"), str), f"{where}.refusal", "must be a string")
            parts.append(part["refusal"] or "[refusal]")
        elif kind in ("image_url", "input_image", "input_audio", "input_file", "file"):
            parts.append(f"[{kind}]")
        else:
            raise GatewayRequestInvalid(f"{where}.type", f"unknown content part type {kind!r}")
    return "\n".join(parts)


def _tool_calls(raw: Any, param: str) -> tuple[ToolCall, ...]:
    if raw is None:
        return ()
    _need(isinstance(raw, list), param, "must be a list")
    calls = []
    for j, item in enumerate(raw):
        where = f"{param}.{j}"
        _need(isinstance(item, dict), where, "must be an object")
        _need(isinstance(item.get("id"), str) and item["id"], f"{where}.id", "is required")
        function = item.get("function")
        _need(isinstance(function, dict), f"{where}.function", "must be an object")
        _need(
            isinstance(function.get("name"), str) and function["name"],
            f"{where}.function.name",
            "is required",
        )
        calls.append(decode_call(item["id"], function["name"], function.get("arguments")))
    return tuple(calls)


def decode_call(call_id: str, name: str, raw: Any) -> ToolCall:
    """A ToolCall from wire arguments (a JSON string, an object, or nothing)."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return ToolCall(call_id, name, {}, raw_arguments=raw if isinstance(raw, str) else None)
    if isinstance(raw, dict):
        return ToolCall(call_id, name, raw, raw_arguments=json.dumps(raw, ensure_ascii=False))
    if not isinstance(raw, str):
        return ToolCall(call_id, name, {}, str(raw), "arguments must be a JSON string")
    try:
        decoded = loads(raw)
    except json.JSONDecodeError as exc:
        return ToolCall(call_id, name, {}, raw, f"not JSON: {exc}")
    if not isinstance(decoded, dict):
        return ToolCall(call_id, name, {}, raw, "expected a JSON object")
    return ToolCall(call_id, name, decoded, raw)


def _tools(raw: Any) -> tuple[dict[str, Any], ...]:
    if raw is None:
        return ()
    _need(isinstance(raw, list), "tools", "must be a list")
    tools = []
    for i, tool in enumerate(raw):
        where = f"tools.{i}"
        _need(isinstance(tool, dict), where, "must be an object")
        _need(tool.get("type", "function") == "function", f"{where}.type", "must be 'function'")
        function = tool.get("function")
        _need(isinstance(function, dict), f"{where}.function", "must be an object")
        name = function.get("name")
        _need(isinstance(name, str) and bool(name), f"{where}.function.name", "is required")
        params = function.get("parameters")
        _need(
            params is None or isinstance(params, dict),
            f"{where}.function.parameters",
            "must be a JSON Schema object",
        )
        tools.append({"type": "function", "function": dict(function)})
    return tuple(tools)


def parse_chat_request(body: Any) -> ClientRequest:
    """The gateway request for a ``POST /v1/chat/completions`` body (decoded JSON)."""
    _need(isinstance(body, dict), "body", "must be a JSON object")
    model = body.get("model")
    _need(isinstance(model, str) and bool(model.strip()), "model", "is required (a string)")
    raw = body.get("messages")
    _need(isinstance(raw, list) and bool(raw), "messages", "must be a non-empty list")
    n = body.get("n", 1)
    _need(n in (None, 1), "n", "only n=1 is supported")
    stream = body.get("stream", False)
    _need(isinstance(stream, bool) or stream is None, "stream", "must be a boolean")
    system: list[str] = []
    messages: list[ClientMessage] = []
    # The field names of an error are only spelt out when one is raised: a client resends
    # its whole history on every call, so this loop runs hundreds of times per request.
    for i, message in enumerate(raw):
        if not isinstance(message, dict):
            raise GatewayRequestInvalid(f"messages.{i}", "must be an object")
        role = message.get("role")
        if role not in _ROLES:
            raise GatewayRequestInvalid(f"messages.{i}.role", f"must be one of {', '.join(_ROLES)}")
        content = message.get("content")
        if not isinstance(content, str):
            content = content_text(content, f"messages.{i}.content", allow_none=role == "assistant")
        if role == "user":
            messages.append(ClientMessage("user", content))
        elif role == "assistant":
            calls = message.get("tool_calls")
            calls = _tool_calls(calls, f"messages.{i}.tool_calls") if calls is not None else ()
            messages.append(ClientMessage("assistant", content, calls))
        elif role in ("system", "developer"):
            if messages:
                messages.append(ClientMessage("system", content))
            else:
                system.append(content)
        else:  # tool (and the legacy function role)
            call_id = message.get("tool_call_id") or message.get("name")
            if not isinstance(call_id, str) or not call_id:
                raise GatewayRequestInvalid(f"messages.{i}.tool_call_id", "is required")
            messages.append(ClientMessage("tool", content, tool_call_id=call_id))
    _need(bool(messages), "messages", "must hold at least one non-system message")
    params = {k: body[k] for k in PASSED_PARAMS if body.get(k) is not None}
    options = body.get("stream_options")
    include_usage = isinstance(options, dict) and bool(options.get("include_usage"))
    return ClientRequest(
        api="openai",
        model=model.strip(),
        system="\n\n".join(system),
        messages=tuple(messages),
        tools=_tools(body.get("tools")),
        stream=bool(stream),
        params=params,
        include_usage=include_usage,
    )


def _call_json(call: ToolCall) -> dict[str, Any]:
    return call.to_message()


def chat_completion(
    reply: ClientReply, *, completion_id: str | None = None, created: int | None = None
) -> dict[str, Any]:
    """The ``chat.completion`` object for a reply."""
    message: dict[str, Any] = {
        "role": "assistant",
        "content": reply.content if reply.content or not reply.tool_calls else None,
        "refusal": None,
    }
    if reply.tool_calls:
        message["tool_calls"] = [_call_json(c) for c in reply.tool_calls]
    return {
        "id": completion_id or new_id(),
        "object": "chat.completion",
        "created": created or int(time.time()),
        "model": reply.model,
        "choices": [
            {"index": 0, "message": message, "finish_reason": reply.finish_reason, "logprobs": None}
        ],
        "usage": _usage(reply),
        "scroll": reply.stats.to_dict(),
    }


def _usage(reply: ClientReply) -> dict[str, Any]:
    used = reply.usage
    out: dict[str, Any] = {
        "prompt_tokens": used.input_tokens,
        "completion_tokens": used.output_tokens,
        "total_tokens": used.input_tokens + used.output_tokens,
    }
    if used.cache_reported:  # OpenAI's prompt_tokens already counts them
        out["prompt_tokens_details"] = {"cached_tokens": used.cache_read_input_tokens or 0}
    return out


def new_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex[:24]}"


def pieces(text: str, size: int = _CHUNK_CHARS) -> list[str]:
    """``text`` cut into stream-sized pieces (never empty for a non-empty text)."""
    return [text[i : i + size] for i in range(0, len(text), size)]


class ChunkStream:
    """The ``chat.completion.chunk`` objects of one streamed completion, made as the reply
    is: ``start()`` (the role), ``text(piece)`` as text arrives, ``block(kind, part)`` as a
    client tool call streams (its id and name, then each piece of its arguments; thinking
    has no place in a chunk and is left out), ``end(reply)`` (each tool call not streamed,
    whole, the finish reason with the extension field, and a usage chunk when the client
    asked for one)."""

    def __init__(
        self, model: str, *, completion_id: str | None = None, created: int | None = None
    ) -> None:
        self.base = {
            "id": completion_id or new_id(),
            "object": "chat.completion.chunk",
            "created": created or int(time.time()),
            "model": model,
        }
        self._calls: dict[str, int] = {}  # the id of each tool call streamed: its index
        self._open: int | None = None  # the index of the tool call streaming now
        self._written = ""  # its arguments so far

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            **self.base,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
        }

    def start(self) -> list[dict[str, Any]]:
        return [self._chunk({"role": "assistant", "content": ""})]

    def text(self, piece: str) -> list[dict[str, Any]]:
        return [self._chunk({"content": piece})] if piece else []

    def block(self, kind: str, part: dict[str, Any] | None) -> list[dict[str, Any]]:
        """A block of the reply as it streams (see ``upstream.OnBlock``): a ``tool_use``
        block's start opens a tool call, its ``input_json_delta`` pieces are the call's
        arguments (``{}`` when it closes with none, as a whole call without arguments is
        sent); anything else (thinking) sends nothing."""
        if kind == "delta" and part is not None and self._open is not None:
            piece = part.get("partial_json") if part.get("type") == "input_json_delta" else None
            if not piece:
                return []
            self._written += piece
            return [self._arguments(self._open, piece)]
        out = self._close_call()  # a block's stop, or the start of another
        if kind == "start" and part is not None and part.get("type") == "tool_use":
            index = self._open = len(self._calls)
            self._calls[str(part.get("id"))] = index
            out.append(self._call_head(index, str(part.get("id")), str(part.get("name"))))
        return out

    def _close_call(self) -> list[dict[str, Any]]:
        index, written = self._open, self._written
        self._open, self._written = None, ""
        if index is None or written.strip():
            return []
        return [self._arguments(index, "{}")]

    def _call_head(self, index: int, call_id: str, name: str) -> dict[str, Any]:
        head = {"index": index, "id": call_id, "type": "function",
                "function": {"name": name, "arguments": ""}}  # fmt: skip
        return self._chunk({"tool_calls": [head]})

    def _arguments(self, index: int, piece: str) -> dict[str, Any]:
        return self._chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})

    def end(self, reply: ClientReply, *, include_usage: bool = False) -> list[dict[str, Any]]:
        out = self._close_call()
        index = len(self._calls)
        for call in reply.tool_calls:
            if call.id in self._calls:
                continue  # streamed as it came
            out.append(self._call_head(index, call.id, call.name))
            out += [
                self._arguments(index, p)
                for p in pieces(call.to_message()["function"]["arguments"])
            ]
            index += 1
        last = self._chunk({}, reply.finish_reason)
        last["scroll"] = reply.stats.to_dict()
        out.append(last)
        if include_usage:
            out.append({**self.base, "choices": [], "usage": _usage(reply)})
        return out


def error_body(
    message: str, *, kind: str, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    """An error in OpenAI's shape."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def models_list(names: list[str], *, owner: str = "scroll") -> dict[str, Any]:
    """``GET /v1/models``: the model names a key may ask for."""
    created = int(time.time())
    return {
        "object": "list",
        "data": [
            {"id": n, "object": "model", "created": created, "owned_by": owner} for n in names
        ],
    }
