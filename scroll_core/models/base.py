"""The model protocol: plain OpenAI-style message dicts in, one ``ModelReply`` out.

Messages are the dicts the Chat Completions API takes (``{"role": "user", "content": ...}``,
assistant messages with ``tool_calls``, ``{"role": "tool", "tool_call_id": ..., "content":
...}``); tools are OpenAI function-tool schemas. A model raises ``ModelError`` when the
provider fails and ``ContextOverflow`` when it refuses the prompt as too long.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

__all__ = ["ChatModel", "ModelReply", "ToolCall", "Usage", "message_text"]


@dataclass(frozen=True)
class ToolCall:
    """One tool call the model asked for.

    ``arguments`` is the decoded JSON object. When the model wrote arguments that are not a
    JSON object, ``arguments`` is empty, ``raw_arguments`` keeps the text and
    ``arguments_error`` says what was wrong, so the loop can tell the model instead of
    guessing.
    """

    id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    raw_arguments: str | None = None
    arguments_error: str | None = None

    def to_message(self) -> dict[str, Any]:
        """This call as it appears in an assistant message's ``tool_calls``."""
        text = self.raw_arguments
        if text is None or self.arguments_error is None:
            text = json.dumps(self.arguments, ensure_ascii=False)
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": text},
        }


@dataclass(frozen=True)
class Usage:
    """Tokens the provider billed for one call (0 when it did not say).

    ``input_tokens`` is every prompt token of the call, the ones served from the provider's
    prompt cache and the ones written to it included: OpenAI's ``prompt_tokens`` as it comes,
    Anthropic's ``input_tokens + cache_read_input_tokens + cache_creation_input_tokens``. It
    means the same whichever provider answered (and is what OpenTelemetry's
    ``gen_ai.usage.input_tokens`` asks for).

    ``cache_read_input_tokens`` and ``cache_creation_input_tokens`` are the parts of
    ``input_tokens`` that the provider read from its prompt cache (billed at the cache price)
    and wrote to it (Anthropic bills those above the input price; OpenAI writes none it
    bills). ``None`` when the provider did not say, which is not the same as 0: a caller may
    then estimate them. ``uncached_input_tokens`` is the rest, billed at the input price.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int | None = None
    cache_creation_input_tokens: int | None = None

    @property
    def uncached_input_tokens(self) -> int:
        """The prompt tokens neither read from the cache nor written to it."""
        cached = (self.cache_read_input_tokens or 0) + (self.cache_creation_input_tokens or 0)
        return max(0, self.input_tokens - cached)

    @property
    def cache_reported(self) -> bool:
        """Whether the provider said how much of the prompt its cache read or wrote."""
        return self.cache_read_input_tokens is not None or (
            self.cache_creation_input_tokens is not None
        )

    def __add__(self, other: Usage) -> Usage:
        """Two calls' usage summed (the gateway's recall loop answers with its calls' sum); a
        cache count stays ``None`` only when neither call reported it."""
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            _add(self.cache_read_input_tokens, other.cache_read_input_tokens),
            _add(self.cache_creation_input_tokens, other.cache_creation_input_tokens),
        )


def _add(a: int | None, b: int | None) -> int | None:
    return None if a is None and b is None else (a or 0) + (b or 0)


@dataclass(frozen=True)
class ModelReply:
    """What one model call returned.

    ``model`` is the model name the provider reported (it may differ from the requested
    one, e.g. a dated snapshot); ``finish_reason`` is the provider's (``stop``,
    ``tool_calls``, ``length``, ...); ``attempts`` counts retried calls, 1 when the first
    attempt succeeded; ``thinking`` holds an Anthropic model's ``thinking`` and
    ``redacted_thinking`` blocks as it sent them (signatures included: they must go back
    unchanged).
    """

    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = field(default_factory=Usage)
    finish_reason: str = "stop"
    model: str = ""
    attempts: int = 1
    thinking: tuple[dict[str, Any], ...] = ()

    def to_message(self) -> dict[str, Any]:
        """The assistant message to append to the conversation."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = [call.to_message() for call in self.tool_calls]
        return message


@runtime_checkable
class ChatModel(Protocol):
    """Anything that can complete a conversation with tools.

    ``name`` identifies the model in telemetry; ``context_size`` is its window in tokens,
    the ``C`` every eviction budget is computed from.
    """

    name: str
    context_size: int

    def complete(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> ModelReply: ...


def message_text(message: dict[str, Any]) -> str:
    """The text of a message whose ``content`` is a string, a list of parts, or missing."""
    content = message.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "\n".join(parts)
    return str(content)
