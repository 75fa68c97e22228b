"""What a ``chat`` span says about the messages of its model call, when an operator asks.

The OpenTelemetry GenAI semantic conventions put a call's content in three opt-in attributes,
JSON strings of messages made of typed parts (``{"role": "user", "parts": [{"type": "text",
"content": "..."}]}``):

* ``gen_ai.system_instructions``: the leading system messages, as a list of parts;
* ``gen_ai.input.messages``: the rest of what was sent;
* ``gen_ai.output.messages``: the reply, with its ``finish_reason``.

They are captured only when ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`` (the
conventions' switch; off by default: a window holds whatever users and tools wrote). Each is
at most ``SCROLL_GENAI_CONTENT_MAX_BYTES`` bytes of UTF-8 (default 64 KiB) and stays valid
JSON when cut: the longest strings lose their middle to a marker (``…[N characters cut]…``),
and when even that is not enough the oldest messages give way to one that says how many went.

With them go OpenInference's attributes (``openinference.span.kind``, ``llm.model_name``,
``llm.token_count.*``, ``input.value``/``output.value`` and their MIME types), which Arize
Phoenix lists spans by; ``input.value`` and ``output.value`` are the same JSON strings as the
GenAI messages, so Langfuse, which prefers them to ``gen_ai.*``, shows the same thing.
docs/operations.md says which backend reads what.

Messages come in the Chat Completions shape the models take (``scroll_core.models.base``).
Nothing here imports OpenTelemetry; ``telemetry.chat_input``/``chat_output`` decide when to
call it and put the result on the span.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from .errors import ConfigError

__all__ = [
    "CAPTURE_VARIABLE",
    "DEFAULT_MAX_BYTES",
    "MAX_BYTES_VARIABLE",
    "capture_enabled",
    "input_attributes",
    "input_messages",
    "max_bytes",
    "output_attributes",
    "output_messages",
    "system_instructions",
    "to_json",
]

CAPTURE_VARIABLE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
MAX_BYTES_VARIABLE = "SCROLL_GENAI_CONTENT_MAX_BYTES"
DEFAULT_MAX_BYTES = 65_536
# Below this a cut message list has no room left for what it says.
MIN_MAX_BYTES = 1024
# A cut string keeps at least this many characters of its head and tail together.
MIN_KEEP = 32

SYSTEM_INSTRUCTIONS = "gen_ai.system_instructions"
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
# OpenInference (Arize Phoenix).
SPAN_KIND = "openinference.span.kind"
MODEL_NAME = "llm.model_name"
TOKENS_PROMPT = "llm.token_count.prompt"
TOKENS_COMPLETION = "llm.token_count.completion"
TOKENS_TOTAL = "llm.token_count.total"
INPUT_VALUE = "input.value"
INPUT_MIME = "input.mime_type"
OUTPUT_VALUE = "output.value"
OUTPUT_MIME = "output.mime_type"
JSON_MIME = "application/json"
# How many bytes cutting took from the input (system instructions and messages) and output.
INPUT_CUT = "scroll.input_cut_bytes"
OUTPUT_CUT = "scroll.output_cut_bytes"

# "true" is the conventions' value; the GenAI utilities of opentelemetry-python-contrib also
# take these two, which keep content on spans.
_CAPTURE_ON = frozenset({"true", "span_only", "span_and_event"})
_SYSTEM_ROLES = frozenset({"system", "developer"})
# The conventions' finish reasons for the ones providers spell their own way.
_FINISH_REASONS = {
    "tool_calls": "tool_call",
    "function_call": "tool_call",
    "tool_use": "tool_call",
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
}
# Keys of messages and parts whose values are names, never cut.
_FIXED = frozenset({"role", "type", "id", "name", "finish_reason", "modality", "mime_type"})


def capture_enabled(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether message content goes on chat spans (the conventions' opt-in variable)."""
    return environ.get(CAPTURE_VARIABLE, "").strip().lower() in _CAPTURE_ON


def max_bytes(environ: Mapping[str, str] = os.environ) -> int:
    """The byte cap on each content attribute, from ``SCROLL_GENAI_CONTENT_MAX_BYTES``."""
    raw = environ.get(MAX_BYTES_VARIABLE, "").strip()
    if not raw:
        return DEFAULT_MAX_BYTES
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{MAX_BYTES_VARIABLE}={raw!r} is not a whole number of bytes") from None
    if value < MIN_MAX_BYTES:
        raise ConfigError(f"{MAX_BYTES_VARIABLE} must be at least {MIN_MAX_BYTES}, got {value}")
    return value


# ---------------------------------------------------------------------------- conversion
def system_instructions(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The parts of the system messages that open ``messages``."""
    parts: list[dict[str, Any]] = []
    for message in messages[: _leading_system(messages)]:
        parts += _content_parts(message.get("content"))
    return parts


def input_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` after the leading system ones, in the conventions' shape."""
    return [_message(m) for m in messages[_leading_system(messages) :]]


def output_messages(reply: Mapping[str, Any], finish_reason: str) -> list[dict[str, Any]]:
    """The assistant message a model returned (``ModelReply.to_message()``), with why it
    stopped."""
    message = _message(reply)
    message["finish_reason"] = _FINISH_REASONS.get(finish_reason, finish_reason)
    return [message]


def _leading_system(messages: Sequence[Mapping[str, Any]]) -> int:
    count = 0
    for message in messages:
        if message.get("role") not in _SYSTEM_ROLES:
            break
        count += 1
    return count


def _message(message: Mapping[str, Any]) -> dict[str, Any]:
    role = str(message.get("role") or "user")
    if role == "tool":
        parts = _content_parts(message.get("content"))
        text = "\n".join(p["content"] for p in parts if p["type"] == "text")
        response = {"type": "tool_call_response", "id": message.get("tool_call_id")}
        return {"role": role, "parts": [{**response, "response": text}]}
    parts = _content_parts(message.get("content"))
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        parts.append(
            {
                "type": "tool_call",
                "id": call.get("id"),
                "name": str(function.get("name") or ""),
                "arguments": _arguments(function.get("arguments")),
            }
        )
    return {"role": role, "parts": parts}


def _content_parts(content: Any) -> list[dict[str, Any]]:
    if content is None or content == "":
        return []
    if isinstance(content, str):
        return [{"type": "text", "content": content}]
    if not isinstance(content, list):
        return [{"type": "text", "content": str(content)}]
    parts: list[dict[str, Any]] = []
    for part in content:
        if isinstance(part, str):
            parts.append({"type": "text", "content": part})
        elif not isinstance(part, Mapping):
            continue
        elif part.get("type") == "text" or (part.get("type") is None and "text" in part):
            parts.append({"type": "text", "content": str(part.get("text") or "")})
        elif part.get("type") == "image_url":
            url = part.get("image_url")
            url = url.get("url") if isinstance(url, Mapping) else url
            parts.append({"type": "uri", "modality": "image", "uri": str(url or "")})
        else:  # any other block keeps its fields: the conventions' generic part
            parts.append({**part, "type": str(part.get("type") or "unknown")})
    return parts


def _arguments(raw: Any) -> Any:
    """Tool call arguments as the object the model wrote, or its text when it is not JSON."""
    if not isinstance(raw, str):
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        return raw


# ---------------------------------------------------------------------------- the byte cap
def to_json(items: list[dict[str, Any]], limit: int) -> tuple[str, int]:
    """``items`` as JSON in at most ``limit`` bytes of UTF-8, and how many bytes were cut.

    When the whole does not fit, every string longer than some length is cut to its head and
    tail around ``…[N characters cut]…``, that length the largest that fits. When even the
    shortest cut does not fit (thousands of messages), the oldest items give way to one that
    says how many went. Names (roles, part types, tool names and ids) are never cut.
    """
    whole = _dumps(items)
    size = _size(whole)
    if size <= limit:
        return whole, 0
    start = 0 if _fits(_cut(items, MIN_KEEP), limit) else _fewest_to_drop(items, limit)
    gap, kept = _gap(items, start), items[start:]
    low, high = MIN_KEEP, max(MIN_KEEP, _longest_string(kept))
    while low < high:  # the longest strings that still fit
        middle = (low + high + 1) // 2
        if _fits(gap + _cut(kept, middle), limit):
            low = middle
        else:
            high = middle - 1
    text = _dumps(gap + _cut(kept, low))
    return text, size - _size(text)


def _fewest_to_drop(items: list[dict[str, Any]], limit: int) -> int:
    """How many of the oldest items must go for the rest, cut short, to fit (all of them
    leaves only the note saying so)."""
    low, high = 1, len(items)
    while low < high:
        middle = (low + high) // 2
        if _fits(_gap(items, middle) + _cut(items[middle:], MIN_KEEP), limit):
            high = middle
        else:
            low = middle + 1
    return low


def _gap(items: list[dict[str, Any]], dropped: int) -> list[dict[str, Any]]:
    """What stands for the ``dropped`` oldest items: a message, or a part in a list of parts."""
    if not dropped:
        return []
    if "parts" not in items[0]:
        return [{"type": "text", "content": f"…[{dropped:,} earlier parts cut]…"}]
    note = {"type": "text", "content": f"…[{dropped:,} earlier messages cut]…"}
    return [{"role": items[0].get("role", "user"), "parts": [note]}]


def _cut(value: Any, keep: int, structural: bool = True) -> Any:
    """``value`` with every string longer than ``keep`` characters cut to its head and tail;
    the names in messages and parts (``_FIXED``) are left whole."""
    if isinstance(value, str):
        return _cut_text(value, keep)
    if isinstance(value, list):
        return [_cut(v, keep, structural) for v in value]
    if isinstance(value, Mapping):
        return {
            k: v if structural and k in _FIXED else _cut(v, keep, structural and k == "parts")
            for k, v in value.items()
        }
    return value


def _cut_text(text: str, keep: int) -> str:
    """``text`` in ``keep`` characters and a marker, unless the marker would make it longer:
    the cut is never longer than the text, so a larger ``keep`` never gives a shorter JSON."""
    marker = f" …[{len(text) - keep:,} characters cut]… "
    if len(text) <= keep + len(marker):
        return text
    head = keep // 2
    return f"{text[:head]}{marker}{text[len(text) - (keep - head) :]}"


def _longest_string(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, Mapping):
        return max((_longest_string(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return max((_longest_string(v) for v in value), default=0)
    return 0


def _fits(items: list[dict[str, Any]], limit: int) -> bool:
    return _size(_dumps(items)) <= limit


def _dumps(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (a client sent \ud800): ASCII escapes hold it
        return json.dumps(value, separators=(",", ":"), default=str)
    return text


def _size(text: str) -> int:
    return len(text.encode("utf-8"))


# ---------------------------------------------------------------------------- span attributes
def input_attributes(
    model: str, messages: Sequence[Mapping[str, Any]], limit: int
) -> dict[str, Any]:
    """A chat span's input content, each attribute within ``limit`` bytes."""
    attributes: dict[str, Any] = {SPAN_KIND: "LLM", MODEL_NAME: model}
    cut = 0
    instructions = system_instructions(messages)
    if instructions:
        attributes[SYSTEM_INSTRUCTIONS], cut = to_json(instructions, limit)
    text, more = to_json(input_messages(messages), limit)
    attributes[INPUT_MESSAGES] = attributes[INPUT_VALUE] = text
    attributes[INPUT_MIME] = JSON_MIME
    if cut + more:
        attributes[INPUT_CUT] = cut + more
    return attributes


def output_attributes(
    reply: Mapping[str, Any],
    finish_reason: str,
    limit: int,
    *,
    input_tokens: int | None = None,
    output_tokens: int | None = None,
) -> dict[str, Any]:
    """A chat span's output content and OpenInference's token counts."""
    text, cut = to_json(output_messages(reply, finish_reason), limit)
    attributes: dict[str, Any] = {OUTPUT_MESSAGES: text, OUTPUT_VALUE: text, OUTPUT_MIME: JSON_MIME}
    if cut:
        attributes[OUTPUT_CUT] = cut
    attributes.update(_token_counts(input_tokens, output_tokens))
    return attributes


def _token_counts(input_tokens: int | None, output_tokens: int | None) -> dict[str, int]:
    counts: dict[str, int] = {}
    if input_tokens is not None:
        counts[TOKENS_PROMPT] = input_tokens
    if output_tokens is not None:
        counts[TOKENS_COMPLETION] = output_tokens
    if input_tokens is not None and output_tokens is not None:
        counts[TOKENS_TOTAL] = input_tokens + output_tokens
    return counts
