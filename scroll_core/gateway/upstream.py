"""The upstream: the model endpoint the gateway calls over HTTP, by default an
OpenAI-compatible Chat Completions one (``anthropic_upstream`` speaks Anthropic Messages with
the same transport: ``HttpUpstream``'s ``url``, ``headers``, ``request_body``, ``decoded``
and ``assembled`` are the format, the rest is shared).

``Upstream`` is the protocol the recall loop needs; ``HttpUpstream`` speaks it with ``httpx``
(one pooled client, shared by threads). With ``on_text`` the call streams (``stream: true``,
usage asked for in the last chunk): each piece of text is handed to ``on_text`` as it
arrives, tool-call deltas are put together, and the assembled reply is returned at the end.
Errors keep the upstream's own message: a status answer is ``ModelError(status=...)``
(``ContextOverflow`` when it says the prompt is too long), a timeout is
``ModelError(code="timeout")``, a connection failure ``ModelError(code="connection_error")``
and an error chunk mid-stream ``ModelError(status=502)``. There are no retries here: a
client that retries gets an aligned, idempotent answer from the gateway instead.

What an Anthropic client asked for that only Anthropic Messages has (``thinking``,
``output_config`` (its effort), its ``anthropic-beta`` header, its ``cache_control``
breakpoints: ``ANTHROPIC_ONLY_PARAMS``)
is dropped on the way to a Chat Completions upstream, as are the thinking blocks an
Anthropic upstream wrote into earlier turns: the request is served without extended thinking
(there is no Chat Completions field that means the same; strict servers refuse unknown ones).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

import httpx

from ..errors import ContextOverflow, ModelError
from ..models.base import ModelReply, ToolCall
from ..models.openai_compat import chat_usage, is_context_overflow
from ..wire import note_sent
from ._json import dumps
from .openai_api import decode_call

__all__ = [
    "ANTHROPIC_ONLY_PARAMS",
    "BETA_PARAM",
    "CACHE_PARAM",
    "DEFAULT_UPSTREAM_TIMEOUT_S",
    "HttpUpstream",
    "OnBlock",
    "OnText",
    "Upstream",
]

DEFAULT_UPSTREAM_TIMEOUT_S = 120.0
# What an Anthropic client asked for that only an Anthropic-format upstream understands,
# carried in the request's params under these names (see ``anthropic_upstream``).
BETA_PARAM = "anthropic_beta"
CACHE_PARAM = "anthropic_cache"
ANTHROPIC_ONLY_PARAMS = (BETA_PARAM, CACHE_PARAM, "thinking", "output_config")
KEEPALIVE = 256


OnText = Callable[[str], None]
# A thinking or tool_use block of the reply as it streams: ("start", the block as it
# opened), ("delta", a thinking_delta, signature_delta or input_json_delta), ("stop", None).
# Chat Completions upstreams hand over their tool calls this way (``CallBlocks``); thinking
# comes from Anthropic upstreams only.
OnBlock = Callable[[str, "dict[str, Any] | None"], None]


class Upstream(Protocol):
    """One chat completion against the upstream model; with ``on_text``, streamed (each
    piece of text handed over as it arrives), the whole reply returned either way. The
    gateway passes ``on_block`` to serve a client that streams: the reply's thinking and
    tool calls are handed over as they come (an upstream that streams neither may leave it
    out; the reply carries them whole either way)."""

    def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        *,
        model: str,
        params: Mapping[str, Any],
        on_text: OnText | None = None,
        on_block: OnBlock | None = None,
    ) -> ModelReply: ...


class HttpUpstream:
    """An OpenAI-compatible endpoint at ``base_url`` (``.../v1``); see the module docstring."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout: float = DEFAULT_UPSTREAM_TIMEOUT_S,
        client: httpx.Client | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout
        # Every request thread may hold a connection: keep them all alive between calls
        # (httpx keeps 20 by default and would reconnect the rest on every call).
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=KEEPALIVE)
        self._client = client or httpx.Client(timeout=timeout, limits=limits)

    def __repr__(self) -> str:
        return f"HttpUpstream({self.base_url!r})"

    def close(self) -> None:
        self._client.close()

    def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        *,
        model: str,
        params: Mapping[str, Any],
        on_text: OnText | None = None,
        on_block: OnBlock | None = None,
    ) -> ModelReply:
        """See ``Upstream.complete``; ``on_block`` (with ``on_text``) gets the reply's
        thinking blocks as they come, before its text (an upstream that did not stream
        hands them over whole, then the text)."""
        body = self.request_body(
            messages, tools, model=model, params=params, stream=on_text is not None
        )
        content = dumps(body)
        note_sent(self.url, content)
        try:
            with self._client.stream(
                "POST",
                self.url,
                content=content,
                headers=self.headers(params),
                timeout=self.timeout,
            ) as response:
                if response.status_code >= 400:
                    response.read()
                    raise _status_error(response, model)
                if "text/event-stream" in response.headers.get("content-type", ""):
                    lines = response.iter_lines()
                    reply = self.assembled(lines, model, on_text or _ignore, on_block)
                    _read_to_the_end(lines)
                    return reply
                # Not streamed (not asked to, or an upstream that ignores ``stream``).
                response.read()
                reply = self.decoded(_json_of(response, model), model)
                if on_block is not None:
                    for block in reply.thinking:
                        for kind, part in whole_block_events(block):
                            on_block(kind, part)
                if on_text is not None and reply.content:
                    on_text(reply.content)
                return reply
        except httpx.TimeoutException:
            raise ModelError(
                f"the upstream did not answer within {self.timeout:g}s", model=model, code="timeout"
            ) from None
        except httpx.HTTPError as exc:
            raise ModelError(
                f"could not reach the upstream at {self.base_url}: {exc}",
                model=model,
                code="connection_error",
            ) from None

    # The format: what is sent where, and how the answer reads back. A subclass for another
    # provider's API overrides these five and keeps the transport, the streaming and errors.
    @property
    def url(self) -> str:
        return f"{self.base_url}/chat/completions"

    def headers(self, params: Mapping[str, Any] | None = None) -> dict[str, str]:
        headers = {"content-type": "application/json"}
        if self.api_key:
            headers["authorization"] = f"Bearer {self.api_key}"
        return headers

    def request_body(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        *,
        model: str,
        params: Mapping[str, Any],
        stream: bool,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {**params, "model": model, "messages": messages}
        for name in ANTHROPIC_ONLY_PARAMS:
            # An Anthropic client's extended thinking, beta features and prompt-cache
            # breakpoints mean nothing to Chat Completions (and strict servers refuse unknown
            # fields): dropped, the request served without them.
            body.pop(name, None)
        if any("thinking" in m for m in messages):  # turns an Anthropic upstream wrote before
            body["messages"] = [
                {k: v for k, v in m.items() if k != "thinking"} if "thinking" in m else m
                for m in messages
            ]
        if tools:
            body["tools"] = tools
        body.pop("stream", None)
        body.pop("stream_options", None)
        if stream:
            body.update(stream=True, stream_options={"include_usage": True})
        return body

    def decoded(self, data: Any, model: str) -> ModelReply:
        return parse_completion(data, model)

    def assembled(
        self,
        lines: Iterator[str],
        model: str,
        on_text: OnText,
        on_block: OnBlock | None = None,
    ) -> ModelReply:
        return _assembled(lines, model, on_text, on_block)


def _ignore(_: str) -> None:
    pass


def _read_to_the_end(lines: Iterator[str]) -> None:
    """Read what follows a streamed reply's end (``[DONE]``, ``message_stop``) to the end of
    the body: a response closed unread cannot give its connection back to the pool, and the
    next call would open a new one (a new TLS handshake to the provider). The providers' own
    SDKs read their streams to the end too. The reply is whole by now: a failure reading on
    only costs the connection."""
    with contextlib.suppress(httpx.HTTPError):
        for _ in lines:
            pass


def whole_block_events(block: dict[str, Any]) -> list[tuple[str, dict[str, Any] | None]]:
    """A whole thinking block as the ``OnBlock`` calls a stream of it makes: opened empty,
    its thinking and signature as deltas, closed (a redacted block opens whole)."""
    if block.get("type") != "thinking":
        return [("start", dict(block)), ("stop", None)]
    return [
        ("start", {"type": "thinking", "thinking": "", "signature": ""}),
        ("delta", {"type": "thinking_delta", "thinking": str(block.get("thinking") or "")}),
        ("delta", {"type": "signature_delta", "signature": str(block.get("signature") or "")}),
        ("stop", None),
    ]


def _json_of(response: httpx.Response, model: str) -> Any:
    try:
        return response.json()
    except ValueError:
        raise ModelError(
            "the upstream answered with a body that is not JSON", model=model, status=502
        ) from None


class CallBlocks:
    """The tool calls of a ``chat.completion.chunk`` stream as ``OnBlock`` calls, the shape
    an Anthropic upstream streams its ``tool_use`` blocks in: a call opens when its arguments
    begin (its id and name are whole by then), each piece of its arguments is an
    ``input_json_delta``, and it closes when the next call opens or the reply ends.

    Chat Completions addresses each piece by the call's index, so a stream could go back to
    a call after the next one began; a client was then handed part of a call that is closed,
    and the upstream's reply is refused (``ModelError``) rather than passed on cut."""

    def __init__(self, on_block: OnBlock, model: str) -> None:
        self.on_block = on_block
        self.model = model
        self.open: int | None = None
        self.closed: set[int] = set()

    def arguments(self, index: int, call: dict[str, str], piece: str) -> None:
        """``piece`` of call ``index``'s arguments arrived (``call``: all of it so far)."""
        if index == self.open:
            if piece:
                self.on_block("delta", {"type": "input_json_delta", "partial_json": piece})
        elif index in self.closed:
            raise ModelError(
                f"the upstream streamed more of tool call {index} after the next call began",
                model=self.model,
                status=502,
            )
        elif call["args"]:
            self._open(index, call)

    def finish(self, calls: dict[int, dict[str, str]]) -> None:
        """The reply is complete: the calls still unopened (no arguments) open, then all close."""
        for index in sorted(calls):
            if index != self.open and index not in self.closed:
                self._open(index, calls[index])
        self._close()

    def _open(self, index: int, call: dict[str, str]) -> None:
        self._close()
        use = {"type": "tool_use", "id": _call_id(index, call), "name": call["name"], "input": {}}
        self.on_block("start", use)
        if call["args"]:
            self.on_block("delta", {"type": "input_json_delta", "partial_json": call["args"]})
        self.open = index

    def _close(self) -> None:
        if self.open is not None:
            self.on_block("stop", None)
            self.closed.add(self.open)
            self.open = None


def _call_id(index: int, call: dict[str, str]) -> str:
    """A streamed call's id: the upstream's, else one made from its index (the same in the
    reply and in the block that streamed it)."""
    return call["id"] or f"call_{index}"


def _assembled(
    lines: Iterator[str], model: str, on_text: OnText, on_block: OnBlock | None = None
) -> ModelReply:
    """The reply a ``chat.completion.chunk`` stream adds up to, its text handed to
    ``on_text`` piece by piece and, with ``on_block``, its tool calls as they come
    (``CallBlocks``)."""
    blocks = CallBlocks(on_block, model) if on_block is not None else None
    text: list[str] = []
    calls: dict[int, dict[str, str]] = {}
    finish = ""
    usage: dict[str, Any] = {}
    answered = model
    ended = False
    for line in lines:
        if not line.startswith("data:"):
            continue  # blank separators, comments, event names
        data = line[5:].strip()
        if data == "[DONE]":
            ended = True
            break
        try:
            chunk = json.loads(data)
        except ValueError:
            raise ModelError(
                f"the upstream streamed a chunk that is not JSON: {data[:200]}",
                model=model,
                status=502,
            ) from None
        if not isinstance(chunk, dict):
            continue
        if chunk.get("error"):
            error = chunk["error"]
            message = error.get("message") if isinstance(error, dict) else str(error)
            raise ModelError(f"the upstream failed mid-stream: {message}", model=model, status=502)
        answered = str(chunk.get("model") or answered)
        usage = chunk.get("usage") or usage
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            piece = delta.get("content")
            if isinstance(piece, str) and piece:
                text.append(piece)
                on_text(piece)
            for item in delta.get("tool_calls") or ():
                index = int(item.get("index") or 0)
                call = calls.setdefault(index, {"id": "", "name": "", "args": ""})
                function = item.get("function") or {}
                call["id"] = call["id"] or str(item.get("id") or "")
                call["name"] += str(function.get("name") or "")
                piece = str(function.get("arguments") or "")
                call["args"] += piece
                if blocks is not None:
                    blocks.arguments(index, call, piece)
            finish = str(choice.get("finish_reason") or finish)
    if not (ended or finish):
        raise ModelError(
            "the upstream's stream ended before the reply did", model=model, status=502
        )
    if blocks is not None:
        blocks.finish(calls)
    tool_calls = tuple(
        decode_call(_call_id(i, c), c["name"], c["args"]) for i, c in sorted(calls.items())
    )
    return ModelReply(
        content="".join(text),
        tool_calls=tool_calls,
        usage=chat_usage(usage),
        finish_reason=finish or ("tool_calls" if tool_calls else "stop"),
        model=answered,
    )


def _status_error(response: httpx.Response, model: str) -> ModelError:
    message, code = response.text.strip()[:2000] or response.reason_phrase, None
    try:
        data = response.json()
    except ValueError:
        data = None
    if isinstance(data, dict):
        error = data.get("error", data)
        if isinstance(error, dict):
            message = str(error.get("message") or message)
            raw_code = error.get("code") or error.get("type")
            code = str(raw_code) if raw_code else None
        elif isinstance(error, str):
            message = error
    status = response.status_code
    if is_context_overflow(status, code, message):
        return ContextOverflow(message, model=model, status=status, code=code)
    return ModelError(message, model=model, status=status, code=code)


def parse_completion(data: Any, model: str) -> ModelReply:
    """A ModelReply from a ``chat.completion`` object (as decoded JSON)."""
    choices = data.get("choices") if isinstance(data, dict) else None
    if not choices or not isinstance(choices[0], dict):
        raise ModelError("the upstream's response has no choices", model=model, status=502)
    choice = choices[0]
    message = choice.get("message") or {}
    calls: list[ToolCall] = []
    for i, item in enumerate(message.get("tool_calls") or []):
        function = item.get("function") or {}
        call_id = item.get("id") or f"call_{i}"
        calls.append(
            decode_call(str(call_id), str(function.get("name") or ""), function.get("arguments"))
        )
    usage = data.get("usage") or {}
    content = message.get("content")
    if isinstance(content, list):
        content = "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ModelReply(
        content=content or "",
        tool_calls=tuple(calls),
        usage=chat_usage(usage),
        finish_reason=str(choice.get("finish_reason") or ("tool_calls" if calls else "stop")),
        model=str(data.get("model") or model),
    )


def to_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)
