"""Fakes shared by the agent-loop tests: a scripted ChatModel and reply builders."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable
from typing import Any

from scroll_core.models import ModelReply, ToolCall, Usage
from scroll_core.prompts import RECALL_TOOL, REPL_TOOL

HEADLINE = "⟦test task | status: working; next: continue | anchors: test⟧"
_ids = itertools.count(1)

Item = ModelReply | BaseException | Callable[[list[dict[str, Any]]], "ModelReply"]


class ScriptedModel:
    """A ChatModel that answers from a script, one entry per call, and keeps every request."""

    def __init__(self, *script: Item, context_size: int = 4096, name: str = "scripted") -> None:
        self.name = name
        self.context_size = context_size
        self.script: list[Item] = list(script)
        self.requests: list[list[dict[str, Any]]] = []
        self.tools: list[list[dict[str, Any]]] = []

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelReply:
        self.requests.append(copy.deepcopy(messages))
        self.tools.append(tools)
        if not self.script:
            raise AssertionError("the scripted model was called more often than scripted")
        item = self.script.pop(0)
        if isinstance(item, BaseException):
            raise item
        if callable(item):
            return item(messages)
        return item


def reply(text: str, *calls: ToolCall, headline: str | None = HEADLINE) -> ModelReply:
    content = f"{text}\n{headline}" if headline else text
    return ModelReply(
        content=content,
        tool_calls=tuple(calls),
        usage=Usage(input_tokens=100, output_tokens=10),
        finish_reason="tool_calls" if calls else "stop",
        model="scripted-0001",
    )


def repl(code: str, call_id: str | None = None) -> ToolCall:
    return ToolCall(call_id or f"call_{next(_ids)}", REPL_TOOL, {"code": code})


def recall(code: str, call_id: str | None = None) -> ToolCall:
    return ToolCall(call_id or f"call_{next(_ids)}", RECALL_TOOL, {"code": code})


def assert_no_orphans(messages: list[dict[str, Any]]) -> None:
    announced: set[str] = set()
    answered: set[str] = set()
    for m in messages:
        if m["role"] == "assistant":
            announced |= {c["id"] for c in m.get("tool_calls", [])}
        if m["role"] == "tool":
            assert m["tool_call_id"] in announced, f"orphan tool result {m['tool_call_id']}"
            answered.add(m["tool_call_id"])
    assert announced == answered, f"calls without results: {announced - answered}"
