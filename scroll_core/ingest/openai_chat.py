"""OpenAI chat messages: a JSON list, a JSON object with ``messages``, or JSONL.

Assistant messages become ``model_turn`` events: one for the text, one per tool call
(name, ``tool_call_id`` and the parsed arguments as ``tool_input``). ``tool`` messages
become ``tool_result`` events carrying the call's id and name, so calls and results pair.
System, developer and user messages become ``context_msg`` events.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
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
    read_jsonl,
    read_text,
    timestamp,
)

__all__ = ["parse"]

_CONTEXT_ROLES = {"system", "developer", "user"}
_RESULT_ROLES = {"tool", "function"}  # "function" is the pre-tools API


@dataclass
class _State:
    session_id: str
    events: list[Draft] = field(default_factory=list)
    tool_names: dict[str, str] = field(default_factory=dict)


def parse(path: Path, *, session_id: str | None = None) -> Parsed:
    problems = Problems(path)
    state = _State(session_id or f"openai:{path.stem}")
    position = 0
    for where, message in _messages(path):
        try:
            if isinstance(message, Bad):
                raise message
            _message(state, as_dict(message, where, "a message"), where, position)
        except Bad as bad:
            problems.add(bad)
        position += 1
    if not position and not problems.found:
        problems.add(Bad("$", "no messages in the file"))
    problems.check()
    return Parsed(state.events)


def _messages(path: Path) -> list[tuple[str, Any]]:
    text = read_text(path)
    if path.suffix.lower() != ".jsonl":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            if exc.msg != "Extra data":  # "Extra data" means one document per line
                where = f"line {exc.lineno} column {exc.colno}"
                return [(where, Bad(where, f"invalid JSON: {exc.msg}"))]
        else:
            if isinstance(data, list):
                return [(f"$[{i}]", m) for i, m in enumerate(data)]
            if isinstance(data, dict) and "messages" in data:
                try:
                    messages = as_list(data["messages"], "$.messages", "'messages'")
                except Bad as bad:
                    return [("$.messages", bad)]
                return [(f"$.messages[{i}]", m) for i, m in enumerate(messages)]
            if not (isinstance(data, dict) and "role" in data):
                reason = "expected a list of messages or an object with 'messages'"
                return [("$", Bad("$", reason))]
    return list(read_jsonl(text))


def _message(state: _State, message: dict[str, Any], where: str, position: int) -> None:
    role = as_str(message, "role", where)
    assert role is not None
    key = f"{position}:{content_hash(message)}"
    common: dict[str, Any] = {
        "session_id": state.session_id,
        "created_at": _created_at(message, where),
    }
    meta = {"source": "openai", "position": position}
    text = _text(message.get("content"), where)
    if role in _CONTEXT_ROLES:
        state.events.append(
            draft(
                **common,
                kind="context_msg",
                role=role,
                name=as_str(message, "name", where, optional=True),
                content=text,
                dedup_key=key,
                metadata=meta,
            )
        )
    elif role == "assistant":
        calls = _calls(message, where)
        if text or not calls:
            state.events.append(
                draft(
                    **common,
                    kind="model_turn",
                    role=role,
                    content=text,
                    dedup_key=key,
                    metadata=meta,
                )
            )
        for index, (call_id, name, tool_input) in enumerate(calls):
            if call_id is not None:
                state.tool_names[call_id] = name
            state.events.append(
                draft(
                    **common,
                    kind="model_turn",
                    role=role,
                    name=name,
                    tool_call_id=call_id,
                    tool_input=tool_input,
                    content=f"{name} {json.dumps(tool_input, ensure_ascii=False)}",
                    dedup_key=f"{key}:call{index}",
                    metadata={**meta, "block": "tool_call"},
                )
            )
    elif role in _RESULT_ROLES:
        call_id = as_str(message, "tool_call_id", where, optional=role == "function")
        given_name = as_str(message, "name", where, optional=True)
        paired = call_id is not None and call_id in state.tool_names
        if role == "tool" and not paired:
            raise Bad(where, f"tool result {call_id!r} answers no earlier assistant tool call")
        state.events.append(
            draft(
                **common,
                kind="tool_result",
                role="tool",
                name=given_name or (state.tool_names.get(call_id) if call_id else None),
                tool_call_id=call_id,
                content=text,
                dedup_key=key,
                metadata=meta,
            )
        )
    else:
        raise Bad(where, f"unknown role {role!r}")


def _calls(message: dict[str, Any], where: str) -> list[tuple[str | None, str, Any]]:
    calls: list[tuple[str | None, str, Any]] = []
    raw = message.get("tool_calls") or []
    for index, call in enumerate(as_list(raw, where, "'tool_calls'")):
        call_where = f"{where}.tool_calls[{index}]"
        call = as_dict(call, call_where, "a tool call")
        call_id = as_str(call, "id", call_where)
        function = as_dict(call.get("function"), call_where, "'function'")
        calls.append((call_id, *_function(function, f"{call_where}.function")))
    legacy = message.get("function_call")
    if legacy is not None:
        calls.append((None, *_function(as_dict(legacy, where, "'function_call'"), where)))
    return calls


def _function(function: dict[str, Any], where: str) -> tuple[str, Any]:
    name = as_str(function, "name", where)
    arguments = function.get("arguments", "")
    assert name is not None
    if not isinstance(arguments, str):
        return name, arguments
    try:
        return name, json.loads(arguments) if arguments.strip() else {}
    except json.JSONDecodeError:
        return name, arguments  # models do emit broken JSON; keep it as written


def _text(content: Any, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for index, part in enumerate(as_list(content, where, "'content'")):
        part_where = f"{where}.content[{index}]"
        part = as_dict(part, part_where, "a content part")
        ptype = as_str(part, "type", part_where)
        if ptype in ("text", "input_text", "output_text"):
            parts.append(as_str(part, "text", part_where) or "")
        elif ptype == "refusal":
            parts.append(as_str(part, "refusal", part_where) or "")
        elif ptype in ("image_url", "input_image"):
            parts.append("[image]")
        elif ptype in ("input_audio", "file"):
            parts.append(f"[{ptype}]")
        else:
            raise Bad(part_where, f"unsupported content part type {ptype!r}")
    return "\n".join(parts)


def _created_at(message: dict[str, Any], where: str) -> str | None:
    for key in ("created_at", "timestamp"):
        value = message.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            try:
                value = datetime.fromtimestamp(value, UTC)
            except (OverflowError, OSError, ValueError):
                raise Bad(f"{where}.{key}", f"not a Unix time: {value!r}") from None
        if value is not None:
            return timestamp(value, f"{where}.{key}")
    return None
