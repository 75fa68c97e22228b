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
    """Tokens the provider billed for one call (0 when it did not say)."""

    input_tokens: int = 0
    output_tokens: int = 0


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
