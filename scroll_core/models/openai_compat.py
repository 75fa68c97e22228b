"""Any OpenAI-compatible Chat Completions endpoint, through the official ``openai`` client.

Works with hosted APIs and with local servers that speak the same protocol (vLLM, Ollama,
the llama.cpp server). Settings come from arguments or, when an argument is left out, from
the environment:

    SCROLL_MODEL_BASE_URL      e.g. http://127.0.0.1:8000/v1 (vLLM), http://127.0.0.1:11434/v1
                               (Ollama); unset means the client's default (OpenAI)
    SCROLL_MODEL_API_KEY       local servers accept any value; falls back to OPENAI_API_KEY
    SCROLL_MODEL_NAME          the model to request (required)
    SCROLL_MODEL_CONTEXT_SIZE  the window in tokens (default 8192: too small only makes
                               eviction start early, too large makes the provider refuse)

Retries are ours, not the client's, so they are counted on the reply: timeouts, connection
failures, 408, 409, 429 and 5xx are retried with exponential backoff (honouring the
provider's ``retry-after``); every other error, and a context-length refusal, is raised at
once as ``ModelError`` or ``ContextOverflow``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import openai

from ..errors import ConfigError, ContextOverflow, ModelError
from ..wire import note_sent
from .base import ModelReply, ToolCall, Usage

__all__ = ["DEFAULT_CONTEXT_SIZE", "OpenAICompatibleModel", "chat_usage", "is_context_overflow"]

DEFAULT_CONTEXT_SIZE = 8192
DEFAULT_TIMEOUT_S = 120.0
DEFAULT_MAX_RETRIES = 2
DEFAULT_BACKOFF_S = 0.5
DEFAULT_BACKOFF_MAX_S = 8.0
# Local servers ignore the key, but the client refuses to start without one.
_PLACEHOLDER_KEY = "not-needed"
_RETRY_STATUSES = frozenset({408, 409, 429})

# What providers say when the prompt does not fit: OpenAI and vLLM ("maximum context
# length"), llama.cpp ("exceeds the available context size", exceed_context_size_error),
# Anthropic-style gateways ("prompt is too long"), Mistral ("too large for model"), and
# others ("context window", "reduce the length").
_OVERFLOW_CODES = frozenset(
    {"context_length_exceeded", "exceed_context_size_error", "string_above_max_length"}
)
_OVERFLOW_TEXT = re.compile(
    r"context[_ ]length|maximum context|context (?:window|size)|prompt is too long|"
    r"too many (?:input )?tokens|reduce the length|input is too long|"
    r"too large for model|exceeds? (?:the )?(?:model'?s? )?(?:max(?:imum)? )?(?:token|context)",
    re.IGNORECASE,
)


def _recording_client(openai: Any) -> type:
    """The client library's own HTTP client class, closed when it is collected as the
    library's default one is (a model nobody closed must not leak its sockets)."""

    class RecordingHttpClient(openai.DefaultHttpxClient):
        def __del__(self) -> None:
            if not self.is_closed:
                # At interpreter shutdown there is nothing left to tell.
                with contextlib.suppress(Exception):
                    self.close()

    return RecordingHttpClient


def _note_request(request: Any) -> None:
    """httpx's request hook: the body as it is sent, for the record (``wire``)."""
    note_sent(str(request.url), request.read())


def is_context_overflow(status: int | None, code: str | None, message: str) -> bool:
    """Whether a provider error means "the prompt is longer than the window"."""
    if code in _OVERFLOW_CODES:
        return True
    if status not in (400, 413, 422):
        return False
    return _OVERFLOW_TEXT.search(message) is not None


class OpenAICompatibleModel:
    """A ``ChatModel`` served by an OpenAI-compatible endpoint; see the module docstring."""

    def __init__(
        self,
        model: str | None = None,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        context_size: int | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        max_retries: int = DEFAULT_MAX_RETRIES,
        backoff_s: float = DEFAULT_BACKOFF_S,
        backoff_max_s: float = DEFAULT_BACKOFF_MAX_S,
        temperature: float | None = None,
        max_output_tokens: int | None = None,
        extra_body: Mapping[str, Any] | None = None,
        env: Mapping[str, str] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        env = os.environ if env is None else env
        name = model or env.get("SCROLL_MODEL_NAME", "").strip()
        if not name:
            raise ConfigError("no model name: pass model= or set SCROLL_MODEL_NAME")
        self.name: str = name
        self.base_url = base_url or env.get("SCROLL_MODEL_BASE_URL", "").strip() or None
        self.context_size: int = _context_size(context_size, env)
        if timeout <= 0:
            raise ConfigError(f"timeout must be positive, got {timeout!r}")
        if max_retries < 0:
            raise ConfigError(f"max_retries must be 0 or more, got {max_retries!r}")
        if backoff_s < 0 or backoff_max_s < 0:
            raise ConfigError("backoff times must be 0 or more")
        self.timeout = float(timeout)
        self.max_retries = int(max_retries)
        self.backoff_s = float(backoff_s)
        self.backoff_max_s = float(backoff_max_s)
        self.temperature = temperature
        self.max_output_tokens = max_output_tokens
        self.extra_body = dict(extra_body or {})
        self._sleep = sleep
        key = (
            api_key
            or env.get("SCROLL_MODEL_API_KEY", "").strip()
            or env.get("OPENAI_API_KEY", "").strip()
            or _PLACEHOLDER_KEY
        )
        # Imported here: the client library takes about a second to import, which every
        # `import scroll_core` (CLI, benches, kernel host) would otherwise pay.
        import openai

        # The record keeps each request's exact bytes: an event hook sees them as they go.
        http = _recording_client(openai)(
            timeout=self.timeout, event_hooks={"request": [_note_request]}
        )
        self._client = openai.OpenAI(
            api_key=key,
            base_url=self.base_url,
            timeout=self.timeout,
            max_retries=0,
            http_client=http,
        )

    def __repr__(self) -> str:
        where = self.base_url or "default endpoint"
        return f"OpenAICompatibleModel({self.name!r} at {where}, context_size={self.context_size})"

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> OpenAICompatibleModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelReply:
        """One chat completion; retried on transient failures, see the module docstring."""
        request: dict[str, Any] = {"model": self.name, "messages": messages}
        if tools:
            request["tools"] = tools
            request["tool_choice"] = "auto"
        if self.temperature is not None:
            request["temperature"] = self.temperature
        if self.max_output_tokens is not None:
            request["max_tokens"] = self.max_output_tokens
        if self.extra_body:
            request["extra_body"] = self.extra_body
        import openai

        attempt = 0
        while True:
            attempt += 1
            try:
                response = self._client.chat.completions.create(**request)
            except openai.APIError as exc:
                error, wait = self._classify(exc)
                if wait is None or attempt > self.max_retries:
                    if attempt > 1:
                        error = type(error)(
                            f"{error.message} (after {attempt} attempts)",
                            model=error.model,
                            status=error.status,
                            code=error.code,
                        )
                    raise error from exc
                self._sleep(self._backoff(attempt, wait))
                continue
            return self._reply(response, attempt)

    # -- internals ------------------------------------------------------------------------

    def _classify(self, exc: openai.APIError) -> tuple[ModelError, float | None]:
        """The error to raise, and None or the provider's suggested wait if it is retryable."""
        import openai

        if isinstance(exc, openai.APITimeoutError):
            return ModelError(f"timed out after {self.timeout:g}s", model=self.name), 0.0
        if isinstance(exc, openai.APIConnectionError):
            where = self.base_url or "the default endpoint"
            return ModelError(f"could not connect to {where}: {exc}", model=self.name), 0.0
        if isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            message = _error_message(exc)
            code = exc.code or _error_type(exc)
            overflow = is_context_overflow(status, _error_type(exc), message)
            if overflow or is_context_overflow(status, code, message):
                return ContextOverflow(message, model=self.name, status=status, code=code), None
            error = ModelError(message, model=self.name, status=status, code=code)
            if status in _RETRY_STATUSES or status >= 500:
                return error, _retry_after(exc.response.headers)
            return error, None
        return ModelError(str(exc) or type(exc).__name__, model=self.name), None

    def _backoff(self, attempt: int, suggested: float) -> float:
        exponential = self.backoff_s * 2 ** (attempt - 1)
        return min(self.backoff_max_s, max(exponential, suggested))

    def _reply(self, response: Any, attempts: int) -> ModelReply:
        choices = getattr(response, "choices", None) or []
        if not choices:
            raise ModelError("the response has no choices", model=self.name)
        choice = choices[0]
        message = choice.message
        calls = tuple(_tool_call(call, i) for i, call in enumerate(message.tool_calls or []))
        return ModelReply(
            content=message.content or "",
            tool_calls=calls,
            usage=chat_usage(getattr(response, "usage", None)),
            finish_reason=str(choice.finish_reason or ("tool_calls" if calls else "stop")),
            model=str(getattr(response, "model", "") or self.name),
            attempts=attempts,
        )


def chat_usage(raw: Any) -> Usage:
    """A Chat Completions ``usage`` (decoded JSON or the ``openai`` package's object) as a
    ``Usage``. ``prompt_tokens`` already counts the tokens the prompt cache served, and
    ``prompt_tokens_details.cached_tokens`` says how many; servers that leave the details out
    (most local ones) leave the cache counts ``None``. OpenAI bills no cache writes."""
    details = _field(raw, "prompt_tokens_details")
    cached = _field(details, "cached_tokens")
    return Usage(
        input_tokens=int(_field(raw, "prompt_tokens") or 0),
        output_tokens=int(_field(raw, "completion_tokens") or 0),
        cache_read_input_tokens=None if cached is None else int(cached),
    )


def _field(value: Any, name: str) -> Any:
    if isinstance(value, Mapping):
        return value.get(name)
    return getattr(value, name, None)


def _context_size(value: int | None, env: Mapping[str, str]) -> int:
    if value is None:
        text = env.get("SCROLL_MODEL_CONTEXT_SIZE", "").strip()
        if not text:
            return DEFAULT_CONTEXT_SIZE
        try:
            value = int(text.replace("_", ""))
        except ValueError:
            raise ConfigError(
                f"SCROLL_MODEL_CONTEXT_SIZE must be a whole number of tokens, got {text!r}"
            ) from None
    if isinstance(value, bool) or not isinstance(value, int) or value < 256:
        raise ConfigError(f"context_size must be a whole number of at least 256, got {value!r}")
    return value


def _tool_call(call: Any, index: int) -> ToolCall:
    function = call.function
    # Some local servers leave the id out; the loop needs one to pair the result.
    call_id = call.id or f"call_{uuid.uuid4().hex[:24]}"
    raw = function.arguments
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return ToolCall(call_id, function.name, {}, raw_arguments=raw)
    if isinstance(raw, dict):
        return ToolCall(call_id, function.name, raw, raw_arguments=json.dumps(raw))
    try:
        decoded = json.loads(raw)
    except json.JSONDecodeError as exc:
        return ToolCall(
            call_id, function.name, {}, raw_arguments=raw, arguments_error=f"not JSON: {exc}"
        )
    if not isinstance(decoded, dict):
        return ToolCall(
            call_id,
            function.name,
            {},
            raw_arguments=raw,
            arguments_error=f"expected a JSON object, got {type(decoded).__name__}",
        )
    return ToolCall(call_id, function.name, decoded, raw_arguments=raw)


def _error_message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        message = body.get("message") or body.get("error") or body.get("detail")
        if isinstance(message, dict):
            message = message.get("message")
        if message:
            return str(message)
    if isinstance(body, str) and body.strip():
        return body.strip()[:2000]
    return exc.message


def _error_type(exc: openai.APIStatusError) -> str | None:
    kind = getattr(exc, "type", None)
    return str(kind) if kind else None


def _retry_after(headers: Mapping[str, str]) -> float:
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return max(0.0, float(value) * scale)
        except ValueError:
            continue  # an HTTP date: fall back to our own backoff
    return 0.0
