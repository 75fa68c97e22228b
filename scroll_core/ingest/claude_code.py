"""Claude Code session transcripts (JSONL, one record a line).

Message lines are ``{type: user|assistant, uuid, parentUuid, sessionId, timestamp,
message: {role, content: str | [blocks]}, toolUseResult?}``; blocks are text, thinking,
tool_use and tool_result. Each block becomes one event so that a ``tool_use`` and its
``tool_result`` carry the same ``tool_call_id``. Summary lines ``{type: summary, summary,
leafUuid}`` become system context messages of the session their leaf belongs to.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._common import (
    Bad,
    Draft,
    Parsed,
    Problems,
    as_dict,
    as_str,
    content_hash,
    draft,
    read_jsonl,
    read_text,
    timestamp,
)

__all__ = ["parse"]

# Session ids are the transcript's sessionId under this namespace, as "locomo:conv-26" is.
SESSION_PREFIX = "claude-code:"
_MESSAGE_TYPES = {"user", "assistant", "system"}
# Bookkeeping records Claude Code writes next to messages; they carry no conversation.
_SKIPPED_TYPES = {"file-history-snapshot", "queue-operation", "progress"}
# toolUseResult duplicates what the model saw; keep it only while it stays small.
_MAX_TOOL_USE_RESULT = 4096


@dataclass
class _State:
    session_override: str | None
    events: list[Draft] = field(default_factory=list)
    tool_names: dict[str, str] = field(default_factory=dict)
    # uuid -> (session, created_at), to place summaries next to their leaf message
    messages: dict[str, tuple[str, str]] = field(default_factory=dict)
    summaries: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    skipped: int = 0


def parse(path: Path, *, session_id: str | None = None) -> Parsed:
    problems = Problems(path)
    state = _State(session_id)
    for where, record in read_jsonl(read_text(path)):
        try:
            if isinstance(record, Bad):
                raise record
            _record(state, as_dict(record, where, "a line"), where)
        except Bad as bad:
            problems.add(bad)
    if not problems.found:
        for where, summary in state.summaries:
            try:
                state.events.append(_summary(state, summary, where))
            except Bad as bad:
                problems.add(bad)
    if not state.events and not problems.found:
        problems.add(Bad("line 1", "no messages in the file"))
    problems.check()
    return Parsed(state.events, skipped=state.skipped)


def _record(state: _State, record: dict[str, Any], where: str) -> None:
    kind = as_str(record, "type", where)
    if kind == "summary":
        as_str(record, "summary", where)
        state.summaries.append((where, record))
        return
    if kind in _SKIPPED_TYPES:
        state.skipped += 1
        return
    if kind not in _MESSAGE_TYPES:
        raise Bad(where, f"unknown record type {kind!r}")
    uuid = as_str(record, "uuid", where)
    raw_session = as_str(record, "sessionId", where)
    assert uuid is not None and raw_session is not None
    # Namespaced like every importer's ids ("locomo:conv-26"), so they never collide.
    session = state.session_override or f"{SESSION_PREFIX}{raw_session}"
    created_at = timestamp(record.get("timestamp"), where, what="'timestamp'")
    meta: dict[str, Any] = {
        "source": "claude-code",
        "uuid": uuid,
        "parent_uuid": record.get("parentUuid"),
        "is_sidechain": record.get("isSidechain") or None,
        "cwd": record.get("cwd"),
    }
    events = _message(state, record, where, kind, meta)
    if uuid in state.messages:
        state.skipped += 1  # resumed sessions repeat earlier lines verbatim
        return
    state.messages[uuid] = (session, created_at)
    for index, event in enumerate(events):
        event.update(session_id=session, created_at=created_at)
        event["dedup_key"] = uuid if len(events) == 1 and index == 0 else f"{uuid}:{index}"
        state.events.append(event)


def _message(
    state: _State, record: dict[str, Any], where: str, kind: str, meta: dict[str, Any]
) -> list[Draft]:
    """The events of one message line, without session, time and dedup key."""
    base = {"session_id": "", "dedup_key": ""}
    if kind == "system":
        text = as_str(record, "content", where)
        assert text is not None
        meta["subtype"] = record.get("subtype")
        return [draft(**base, kind="context_msg", role="system", content=text, metadata=meta)]
    message = as_dict(record.get("message"), where, "'message'")
    role = as_str(message, "role", where) or "user"
    if "content" not in message:
        raise Bad(where, "message has no 'content'")
    content = message["content"]
    meta["model"] = message.get("model")
    if isinstance(content, str):
        turn_kind = "model_turn" if role == "assistant" else "context_msg"
        return [draft(**base, kind=turn_kind, role=role, content=content, metadata=meta)]
    if not isinstance(content, list):
        raise Bad(where, "message 'content' must be a string or an array of blocks")
    results = sum(1 for b in content if isinstance(b, dict) and b.get("type") == "tool_result")
    tool_use_result = record.get("toolUseResult") if results == 1 else None
    events: list[Draft] = []
    for index, block in enumerate(content):
        block_where = f"{where} content[{index}]"
        block = as_dict(block, block_where, "a content block")
        event = _block(state, block, block_where, role, tool_use_result)
        event["metadata"] = {
            **{k: v for k, v in meta.items() if v is not None},
            **event["metadata"],
        }
        events.append(event)
    return events


def _block(
    state: _State, block: dict[str, Any], where: str, role: str, tool_use_result: Any
) -> Draft:
    """One content block as a draft without session, time and dedup key."""
    btype = as_str(block, "type", where)
    turn_kind = "model_turn" if role == "assistant" else "context_msg"
    meta: dict[str, Any] = {"block": btype}
    base = {"session_id": "", "dedup_key": ""}
    if btype == "text":
        text = as_str(block, "text", where)
        assert text is not None
        return draft(**base, kind=turn_kind, role=role, content=text, metadata=meta)
    if btype == "thinking":
        text = as_str(block, "thinking", where)
        assert text is not None
        return draft(**base, kind=turn_kind, role=role, content=text, metadata=meta)
    if btype == "redacted_thinking":
        return draft(
            **base, kind=turn_kind, role=role, content="[redacted thinking]", metadata=meta
        )
    if btype == "image":
        source = block.get("source")
        media = source.get("media_type") if isinstance(source, dict) else None
        text = f"[image: {media}]" if isinstance(media, str) else "[image]"
        return draft(**base, kind=turn_kind, role=role, content=text, metadata=meta)
    if btype == "tool_use":
        call_id = as_str(block, "id", where)
        name = as_str(block, "name", where)
        assert call_id is not None and name is not None
        tool_input = block.get("input")
        state.tool_names[call_id] = name
        return draft(
            **base,
            kind="model_turn",
            role=role,
            name=name,
            tool_call_id=call_id,
            tool_input=tool_input,
            content=f"{name} {json.dumps(tool_input, ensure_ascii=False)}",
            metadata=meta,
        )
    if btype == "tool_result":
        call_id = as_str(block, "tool_use_id", where)
        assert call_id is not None
        name = state.tool_names.get(call_id)
        meta["is_error"] = bool(block.get("is_error"))
        if name is None:
            meta["unpaired"] = True
        if tool_use_result is not None and not isinstance(tool_use_result, str):
            size = len(json.dumps(tool_use_result, ensure_ascii=False))
            if size <= _MAX_TOOL_USE_RESULT:
                meta["tool_use_result"] = tool_use_result
            else:
                meta["tool_use_result_chars"] = size
        return draft(
            **base,
            kind="tool_result",
            role="tool",
            name=name,
            tool_call_id=call_id,
            content=_result_text(block.get("content"), where),
            metadata=meta,
        )
    text = block.get("text")
    if isinstance(text, str):  # a newer block kind that still carries text
        return draft(**base, kind=turn_kind, role=role, content=text, metadata=meta)
    raise Bad(where, f"unsupported content block type {btype!r}")


def _result_text(content: Any, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise Bad(where, "tool_result 'content' must be a string or an array of blocks")
    parts: list[str] = []
    for index, part in enumerate(content):
        part_where = f"{where} content[{index}]"
        part = as_dict(part, part_where, "a tool_result block")
        if part.get("type") == "image":
            parts.append("[image]")
            continue
        text = as_str(part, "text", part_where)
        assert text is not None
        parts.append(text)
    return "\n".join(parts)


def _summary(state: _State, record: dict[str, Any], where: str) -> Draft:
    text = record["summary"]
    leaf = record.get("leafUuid")
    found = state.messages.get(leaf) if isinstance(leaf, str) else None
    if found is None:
        # A summary whose leaf lives in another file belongs to this file's first session.
        found = next(iter(state.messages.values()), None)
    session, created_at = found if found else (state.session_override, None)
    if session is None:
        raise Bad(where, "summary line but no message to take its session from")
    return draft(
        session_id=session,
        kind="context_msg",
        role="system",
        name="summary",
        content=text,
        created_at=created_at,
        dedup_key=f"summary:{leaf}:{content_hash(text)}",
        metadata={"source": "claude-code", "type": "summary", "leaf_uuid": leaf},
    )
