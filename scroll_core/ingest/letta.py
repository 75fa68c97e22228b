"""Letta (MemGPT) agent files (``.af``): the agent's message history.

An agent file is one JSON object with ``messages`` (role, content blocks, ``tool_calls``,
``tool_call_id``, ``tool_returns``, ``created_at``) and ``in_context_message_indices``,
the messages still in the agent's context window. Each message keeps its index and
whether it was in context in metadata; an assistant message with tool calls becomes one
event for its text (inner monologue) and one per call, paired with the ``tool`` messages.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ._common import (
    Bad,
    Draft,
    Parsed,
    Problems,
    as_dict,
    as_list,
    as_str,
    content_hash,
    draft,
    load_json,
    timestamp,
)

__all__ = ["parse"]

_KINDS = {"system": "context_msg", "user": "context_msg", "assistant": "model_turn"}


def parse(path: Path, *, session_id: str | None = None) -> Parsed:
    problems = Problems(path)
    events: list[Draft] = []
    try:
        agent = as_dict(load_json(path), "$", "an agent file")
        messages = as_list(agent.get("messages"), "$.messages", "'messages'")
        in_context = _in_context(agent, len(messages))
        session = session_id or f"letta:{as_str(agent, 'name', '$')}"
    except Bad as bad:
        raise bad.error(path) from None
    tool_names: dict[str, str] = {}
    for index, message in enumerate(messages):
        where = f"$.messages[{index}]"
        try:
            message = as_dict(message, where, "a message")
            meta: dict[str, Any] = {
                "source": "letta",
                "letta_index": index,
                "in_context": index in in_context,
                "in_context_position": in_context.get(index),
                "model": message.get("model"),
                "letta_id": message.get("id"),
            }
            events.extend(_message(session, message, where, meta, tool_names))
        except Bad as bad:
            problems.add(bad)
    if not messages and not problems.found:
        problems.add(Bad("$.messages", "the agent file has no messages"))
    problems.check()
    return Parsed(events)


def _in_context(agent: dict[str, Any], count: int) -> dict[int, int]:
    """Message index -> its position in the context window."""
    where = "$.in_context_message_indices"
    raw = as_list(agent.get("in_context_message_indices") or [], where)
    positions: dict[int, int] = {}
    for position, index in enumerate(raw):
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < count:
            raise Bad(f"{where}[{position}]", f"not the index of a message: {index!r}")
        positions[index] = position
    return positions


def _message(
    session: str,
    message: dict[str, Any],
    where: str,
    meta: dict[str, Any],
    tool_names: dict[str, str],
) -> list[Draft]:
    role = as_str(message, "role", where)
    assert role is not None
    key = str(message.get("id") or f"{meta['letta_index']}:{content_hash(message)}")
    common: dict[str, Any] = {
        "session_id": session,
        "created_at": timestamp(message.get("created_at"), where, what="'created_at'"),
        "metadata": meta,
    }
    text = _text(message.get("content"), where)
    if role == "tool":
        call_id = as_str(message, "tool_call_id", where)
        assert call_id is not None
        name = tool_names.get(call_id)
        returns = message.get("tool_returns") or None
        extra = {"unpaired": True if name is None else None, "tool_returns": returns}
        return [
            draft(
                **{**common, "metadata": {**meta, **extra}},
                kind="tool_result",
                role="tool",
                name=name or message.get("name"),
                tool_call_id=call_id,
                content=text,
                dedup_key=key,
            )
        ]
    if role not in _KINDS:
        raise Bad(where, f"unknown role {role!r}")
    calls = as_list(message.get("tool_calls") or [], f"{where}.tool_calls")
    events: list[Draft] = []
    if text or not calls:
        events.append(
            draft(
                **common,
                kind=_KINDS[role],
                role=role,
                name=message.get("name") if role != "assistant" else None,
                content=text,
                dedup_key=key,
            )
        )
    for index, call in enumerate(calls):
        call_where = f"{where}.tool_calls[{index}]"
        call = as_dict(call, call_where, "a tool call")
        call_id = as_str(call, "id", call_where)
        function = as_dict(call.get("function"), call_where, "'function'")
        name = as_str(function, "name", f"{call_where}.function")
        assert call_id is not None and name is not None
        tool_names[call_id] = name
        tool_input = _arguments(function.get("arguments"))
        events.append(
            draft(
                **{**common, "metadata": {**meta, "block": "tool_call"}},
                kind="model_turn",
                role=role,
                name=name,
                tool_call_id=call_id,
                tool_input=tool_input,
                content=f"{name} {json.dumps(tool_input, ensure_ascii=False)}",
                dedup_key=f"{key}:call{index}",
            )
        )
    return events


def _arguments(arguments: Any) -> Any:
    if not isinstance(arguments, str):
        return arguments
    try:
        return json.loads(arguments) if arguments.strip() else {}
    except json.JSONDecodeError:
        return arguments


def _text(content: Any, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for index, block in enumerate(as_list(content, f"{where}.content", "'content'")):
        block_where = f"{where}.content[{index}]"
        block = as_dict(block, block_where, "a content block")
        for field in ("text", "reasoning"):
            if isinstance(block.get(field), str):
                parts.append(block[field])
                break
        else:
            raise Bad(block_where, f"unsupported content block type {block.get('type')!r}")
    return "\n".join(parts)
