"""Real conversations as successive gateway requests (shared by bench/gateway.py and the
long-conversation tests).

* ``locomo_exchanges``: a LoCoMo conversation as (client message, model reply) pairs: the
  first speaker's turns are the client's (with the session's date when a session opens),
  the second speaker's the replies a scripted upstream gives; consecutive turns of one
  speaker are joined.
* ``claude_code_messages``: a Claude Code transcript as the Anthropic Messages history
  Claude Code itself sends: consecutive records of one role merged into one message,
  ``thinking`` blocks and summary lines left out.
* ``completion_for``: the upstream's ``chat.completion`` body that answers with given text
  and tool calls (an assistant message of a transcript replayed by the scripted upstream).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["claude_code_messages", "completion_for", "locomo_exchanges", "locomo_qa"]


def locomo_exchanges(
    path: Path, *, sample: int = 0, sessions: int | None = None
) -> list[tuple[str, str]]:
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    conversation = data[sample]["conversation"]
    first = conversation["speaker_a"]
    pairs: list[tuple[str, str]] = []
    client: list[str] = []
    reply: list[str] = []
    number = 1
    while f"session_{number}" in conversation and (sessions is None or number <= sessions):
        date = conversation.get(f"session_{number}_date_time", "")
        opening = f"[{date}] " if date else ""
        for turn in conversation[f"session_{number}"]:
            line = f"{turn['speaker']} ({turn['dia_id']}): {turn['text']}"
            if turn["speaker"] == first:
                if reply:
                    pairs.append(("\n".join(client), "\n".join(reply)))
                    client, reply = [], []
                client.append(opening + line)
                opening = ""
            elif client:
                reply.append(line)
        number += 1
    if client:
        pairs.append(("\n".join(client), "\n".join(reply) or "(no reply)"))
    return pairs


def locomo_qa(path: Path, *, sample: int = 0) -> list[dict[str, Any]]:
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    return [qa for qa in data[sample]["qa"] if qa.get("evidence") and "answer" in qa]


def claude_code_messages(path: Path) -> list[dict[str, Any]]:
    merged: list[dict[str, Any]] = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        message = record.get("message") if isinstance(record, dict) else None
        if record.get("type") not in ("user", "assistant") or not isinstance(message, dict):
            continue
        content = message.get("content")
        if isinstance(content, str):
            blocks = [{"type": "text", "text": content}]
        elif isinstance(content, list):
            blocks = [
                _clean(b)
                for b in content
                if isinstance(b, dict) and b.get("type") in ("text", "tool_use", "tool_result")
            ]
        else:
            continue
        if not blocks:
            continue
        role = message.get("role", record["type"])
        if merged and merged[-1]["role"] == role:
            merged[-1]["content"].extend(blocks)
        else:
            merged.append({"role": role, "content": blocks})
    while merged and merged[0]["role"] != "user":
        merged.pop(0)
    return merged


def _clean(block: dict[str, Any]) -> dict[str, Any]:
    keep = {"text": ("type", "text"), "tool_use": ("type", "id", "name", "input")}
    fields = keep.get(block["type"], ("type", "tool_use_id", "content", "is_error"))
    return {k: block[k] for k in fields if k in block}


def completion_for(text: str, tool_calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if tool_calls:
        message["tool_calls"] = tool_calls
    prompt, out = 100, max(1, len(text) // 4)
    return {
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "created": 1,
        "model": "scripted-upstream",
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if tool_calls else "stop",
            }
        ],
        "usage": {"prompt_tokens": prompt, "completion_tokens": out, "total_tokens": prompt + out},
    }
