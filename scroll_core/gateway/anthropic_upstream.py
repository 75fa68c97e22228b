"""An Anthropic Messages upstream: the view sent as a ``POST {base}/v1/messages`` request, the
reply (or its event stream) read back as the gateway's ``ModelReply``.

``AnthropicUpstream`` keeps ``HttpUpstream``'s transport, timeouts and error mapping (an
Anthropic error body ``{"type": "error", "error": {"type", "message"}}`` reads as a
``ModelError`` with the HTTP status, the error type as its code and the upstream's message
kept; "prompt is too long" is a ``ContextOverflow``) and swaps the format:

- the request: the view's leading system message becomes the top-level ``system`` (one text
  block); user
  text, assistant text and ``tool_use`` blocks, and tool results as ``tool_result`` blocks
  (first in their user turn, as the API requires) make alternating turns; tools, the recall
  tool among them, become Anthropic custom tools (``anthropic_api.anthropic_tool``);
  ``max_tokens`` is the client's (``max_tokens`` or ``max_completion_tokens``) or
  ``DEFAULT_MAX_TOKENS``; ``stop`` becomes ``stop_sequences`` and ``tool_choice`` /
  ``parallel_tool_calls`` Anthropic's ``tool_choice``; the rest is dropped: sampling
  options (temperature, top_p: the Messages API's published request schema has none, and
  the ``anthropic`` package refuses them) and OpenAI-only options (seed, penalties,
  response_format, ...). With ``cache`` (the default) the system block and the view's last
  block carry ``cache_control`` breakpoints, so successive calls of a session (recall steps,
  the client's next turns) read the unchanged front of the view from the upstream's prompt
  cache; the client's own breakpoints (on its tools, its system prompt, and messages the
  view holds with the text the client sent) go with them, at most four in all
  (``anthropic_request._fit_breakpoints``). A tool result whose call is not in the turn before it
  (or a call whose result never came) travels as text, so one odd history cannot make every
  later request a 400. The request is built in ``anthropic_request``, which keeps the turns
  per session between calls (``TurnFold``): a view that only grew converts its new
  messages alone;
- the reply: text blocks (joined), ``tool_use`` blocks as tool calls, the stop reason as a
  finish reason (``anthropic_api.FINISH``), usage with cached input counted as input and
  the cache's reads and writes kept apart (``Usage``);
- the stream: ``message_start`` (model, input usage), ``content_block_start`` /
  ``content_block_delta`` (``text_delta`` handed to ``on_text`` as it arrives,
  ``input_json_delta`` put together per block; thinking blocks put together and, with
  ``on_block``, handed over as they come), ``message_delta`` (stop reason, output
  usage), ``message_stop``; ``ping`` is skipped; an ``error`` event is a
  ``ModelError`` with the status its type comes with (``overloaded_error``: 529); a stream
  that stops before ``message_stop`` is an error.

``http_upstream(format, ...)`` picks the class for a key's upstream format.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from typing import Any, Literal

import httpx

from ..errors import ConfigError, GatewayRequestInvalid, ModelError
from ..models.base import ModelReply, ToolCall, Usage
from .anthropic_api import ERROR_STATUS, FINISH
from .anthropic_api import reply_blocks as _reply_blocks
from .anthropic_request import DEFAULT_MAX_TOKENS, THINKING_BLOCKS, TurnFold, messages_body
from .openai_api import decode_call
from .upstream import (
    ANTHROPIC_ONLY_PARAMS,
    BETA_PARAM,
    CACHE_PARAM,
    DEFAULT_UPSTREAM_TIMEOUT_S,
    HttpUpstream,
    OnBlock,
    OnText,
)

__all__ = [
    "ANTHROPIC_ONLY_PARAMS",
    "ANTHROPIC_VERSION",
    "BETA_PARAM",
    "CACHE_PARAM",
    "DEFAULT_MAX_TOKENS",
    "UPSTREAM_FORMATS",
    "AnthropicUpstream",
    "TurnFold",
    "UpstreamFormat",
    "http_upstream",
    "messages_body",
    "parse_message",
]

ANTHROPIC_VERSION = "2023-06-01"
# Sessions whose converted turns an upstream keeps (each about its view's size in small
# dicts sharing the view's strings); a session past them converts its next view whole.
FOLDS_KEPT = 64
UpstreamFormat = Literal["openai", "anthropic"]
UPSTREAM_FORMATS: tuple[UpstreamFormat, ...] = ("openai", "anthropic")


def _usage(raw: Any, into: Usage | None = None) -> Usage:
    """A Messages ``usage`` as a ``Usage``, over ``into`` (what the stream said before: the
    counts an event leaves out keep their values). Anthropic's ``input_tokens`` leaves out the
    tokens read from the prompt cache and written to it; ``Usage.input_tokens`` counts them."""
    raw = raw if isinstance(raw, dict) else {}
    base = into or Usage()
    read = _count(raw, "cache_read_input_tokens", base.cache_read_input_tokens)
    written = _count(raw, "cache_creation_input_tokens", base.cache_creation_input_tokens)
    uncached = _count(raw, "input_tokens", base.uncached_input_tokens) or 0
    output = raw.get("output_tokens")
    return Usage(
        input_tokens=uncached + (read or 0) + (written or 0),
        output_tokens=base.output_tokens if output is None else int(output),
        cache_read_input_tokens=read,
        cache_creation_input_tokens=written,
    )


def _count(raw: dict[str, Any], name: str, before: int | None) -> int | None:
    value = raw.get(name)
    return before if value is None else int(value)


def _malformed(exc: GatewayRequestInvalid, model: str) -> ModelError:
    return ModelError(f"the upstream's reply is malformed: {exc}", model=model, status=502)


def parse_message(data: Any, model: str) -> ModelReply:
    """A ModelReply from a Messages ``message`` object (as decoded JSON)."""
    if not isinstance(data, dict) or data.get("type") != "message":
        if isinstance(data, dict) and data.get("type") == "error":
            raise _stream_error(data, model)
        raise ModelError("the upstream's response is not a message", model=model, status=502)
    try:
        text, calls = _reply_blocks(data.get("content"))
    except GatewayRequestInvalid as exc:
        raise _malformed(exc, model) from None
    stop = str(data.get("stop_reason") or "")
    thinking = tuple(
        b for b in data["content"] if isinstance(b, dict) and b.get("type") in THINKING_BLOCKS
    )
    return ModelReply(
        content=text,
        tool_calls=calls,
        usage=_usage(data.get("usage")),
        finish_reason=FINISH.get(stop, "tool_calls" if calls else "stop"),
        model=str(data.get("model") or model),
        thinking=thinking,
    )


def _stream_error(event: dict[str, Any], model: str) -> ModelError:
    error = event.get("error")
    error = error if isinstance(error, dict) else {"message": str(error)}
    kind = str(error.get("type") or "api_error")
    message = str(error.get("message") or kind)
    return ModelError(message, model=model, status=ERROR_STATUS.get(kind, 502), code=kind)


def assemble_stream(
    lines: Iterator[str], model: str, on_text: OnText, on_block: OnBlock | None = None
) -> ModelReply:
    """The reply a Messages event stream adds up to, its text handed to ``on_text`` piece
    by piece and its thinking and ``tool_use`` blocks to ``on_block`` as they come
    (``"start"`` with the block as it opened, ``"delta"`` with each thinking, signature or
    ``input_json_delta``, ``"stop"``)."""
    text: list[str] = []
    blocks: dict[int, dict[str, str]] = {}  # tool_use blocks: id, name, the input's JSON
    thoughts: dict[int, dict[str, Any]] = {}  # thinking blocks, put together from deltas
    usage = Usage()
    stop = ""
    answered = model
    ended = False
    for line in lines:
        if not line.startswith("data:"):
            continue  # "event:" names repeat the data's type; blank separators
        try:
            event = json.loads(line[5:].strip())
        except ValueError:
            raise ModelError(
                f"the upstream streamed an event that is not JSON: {line[5:205]}",
                model=model,
                status=502,
            ) from None
        kind = event.get("type") if isinstance(event, dict) else None
        if kind == "error":
            raise _stream_error(event, model)
        if kind == "message_start":
            message = event.get("message") or {}
            answered = str(message.get("model") or answered)
            usage = _usage(message.get("usage"), usage)
        elif kind == "content_block_start":
            block = event.get("content_block") or {}
            index = int(event.get("index") or 0)
            if block.get("type") == "tool_use":
                given = block.get("input")
                call_id = str(block.get("id") or "") or f"toolu_{len(blocks)}"
                blocks[index] = {
                    "id": call_id,
                    "name": str(block.get("name") or ""),
                    "json": "",
                    "given": json.dumps(given) if given else "",
                }
                if on_block is not None:
                    use = {"type": "tool_use", "id": call_id, "name": blocks[index]["name"]}
                    on_block("start", {**use, "input": {}})
                    if given:
                        on_block(
                            "delta",
                            {"type": "input_json_delta", "partial_json": blocks[index]["given"]},
                        )
            elif block.get("type") in THINKING_BLOCKS:
                thoughts[index] = dict(block)
                if on_block is not None:
                    on_block("start", dict(block))
            elif block.get("type") == "text" and block.get("text"):
                text.append(block["text"])
                on_text(block["text"])
        elif kind == "content_block_delta":
            delta = event.get("delta") or {}
            if delta.get("type") == "text_delta" and delta.get("text"):
                text.append(delta["text"])
                on_text(delta["text"])
            elif delta.get("type") == "input_json_delta":
                call = blocks.get(int(event.get("index") or 0))
                if call is not None:
                    call["json"] += str(delta.get("partial_json") or "")
                    if on_block is not None:
                        on_block("delta", dict(delta))
            elif delta.get("type") in ("thinking_delta", "signature_delta"):
                thought = thoughts.get(int(event.get("index") or 0))
                field = "thinking" if delta["type"] == "thinking_delta" else "signature"
                if thought is not None:
                    thought[field] = str(thought.get(field) or "") + str(delta.get(field) or "")
                    if on_block is not None:
                        on_block("delta", dict(delta))
        elif kind == "content_block_stop":
            index = int(event.get("index") or 0)
            if on_block is not None and (index in thoughts or index in blocks):
                on_block("stop", None)
        elif kind == "message_delta":
            stop = str((event.get("delta") or {}).get("stop_reason") or stop)
            usage = _usage(event.get("usage"), usage)
        elif kind == "message_stop":
            ended = True
            break
    if not ended:
        raise ModelError(
            "the upstream's stream ended before the reply did", model=model, status=502
        )
    calls: tuple[ToolCall, ...] = tuple(
        decode_call(c["id"], c["name"], c["json"] or c["given"] or "{}")
        for _, c in sorted(blocks.items())
    )
    return ModelReply(
        content="".join(text),
        tool_calls=calls,
        usage=usage,
        finish_reason=FINISH.get(stop, "tool_calls" if calls else "stop"),
        model=answered,
        thinking=tuple(b for _, b in sorted(thoughts.items())),
    )


class AnthropicUpstream(HttpUpstream):
    """An Anthropic Messages endpoint at ``base_url`` (``https://api.anthropic.com``; a
    trailing ``/v1`` is taken off); see the module docstring."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout: float = DEFAULT_UPSTREAM_TIMEOUT_S,
        client: httpx.Client | None = None,
        version: str = ANTHROPIC_VERSION,
        default_max_tokens: int = DEFAULT_MAX_TOKENS,
        cache: bool = True,
    ) -> None:
        base = base_url.rstrip("/")
        super().__init__(base.removesuffix("/v1"), api_key=api_key, timeout=timeout, client=client)
        self.version = version
        self.default_max_tokens = default_max_tokens
        self.cache = cache
        # One TurnFold per view seen last, keyed by the id of its first message (the system
        # message, which every later view of the session that only grew shares); the fold
        # holds that message, so the id stays its own while the fold is kept.
        self._folds: OrderedDict[int, TurnFold] = OrderedDict()
        self._folds_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"AnthropicUpstream({self.base_url!r})"

    @property
    def url(self) -> str:
        return f"{self.base_url}/v1/messages"

    def headers(self, params: Mapping[str, Any] | None = None) -> dict[str, str]:
        headers = {"content-type": "application/json", "anthropic-version": self.version}
        if self.api_key:
            headers["x-api-key"] = self.api_key
        beta = (params or {}).get(BETA_PARAM)
        if beta:
            headers["anthropic-beta"] = str(beta)  # the client's, as it sent it
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
        key = id(messages[0]) if messages else 0
        with self._folds_lock:  # taken out while in use: a session is served one at a time
            fold = self._folds.pop(key, None) or TurnFold()
        body = messages_body(
            messages,
            tools,
            model=model,
            params=params,
            stream=stream,
            default_max_tokens=self.default_max_tokens,
            cache=self.cache,
            fold=fold,
        )
        if messages:
            with self._folds_lock:
                self._folds[key] = fold
                while len(self._folds) > FOLDS_KEPT:
                    self._folds.popitem(last=False)
        return body

    def decoded(self, data: Any, model: str) -> ModelReply:
        return parse_message(data, model)

    def assembled(
        self,
        lines: Iterator[str],
        model: str,
        on_text: OnText,
        on_block: OnBlock | None = None,
    ) -> ModelReply:
        return assemble_stream(lines, model, on_text, on_block)


def http_upstream(
    upstream_format: str,
    base_url: str,
    *,
    api_key: str | None = None,
    timeout: float = DEFAULT_UPSTREAM_TIMEOUT_S,
) -> HttpUpstream:
    """The HTTP upstream for a key's format: ``openai`` (Chat Completions at ``base_url``,
    ``.../v1``) or ``anthropic`` (Messages at ``base_url/v1/messages``)."""
    if upstream_format == "openai":
        return HttpUpstream(base_url, api_key=api_key, timeout=timeout)
    if upstream_format == "anthropic":
        return AnthropicUpstream(base_url, api_key=api_key, timeout=timeout)
    raise ConfigError(
        f"unknown upstream format {upstream_format!r}: expected one of {UPSTREAM_FORMATS}"
    )
