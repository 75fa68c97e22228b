"""What an Anthropic Messages request must be: the ``anthropic`` package's published request
types (validated with pydantic), plus the rules the API states beside them."""

from __future__ import annotations

import itertools
from typing import Any

from anthropic.types.message_create_params import MessageCreateParamsBase
from pydantic import TypeAdapter

_REQUEST = TypeAdapter(MessageCreateParamsBase)
_TOP_LEVEL = set(MessageCreateParamsBase.__annotations__) | {"stream"}


def _drained(value: Any) -> Any:
    """``value`` with pydantic's lazily validated iterables run (validating them)."""
    if isinstance(value, dict):
        return {k: _drained(v) for k, v in value.items()}
    if isinstance(value, (str, bytes, int, float, bool)) or value is None:
        return value
    return [_drained(v) for v in value]


def blocks_of(turn: dict[str, Any]) -> list[dict[str, Any]]:
    """A turn's content blocks (a string is one text block, as the API reads it)."""
    content = turn["content"]
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


def assert_valid_request(body: dict[str, Any]) -> None:
    """A Messages request as the API's published types define it, roles alternating, no
    empty text block, every tool_result answering a tool_use of the turn just before."""
    assert set(body) <= _TOP_LEVEL, set(body) - _TOP_LEVEL
    _drained(_REQUEST.validate_python(body))
    turns = body["messages"]
    assert turns[0]["role"] == "user"
    assert all(a["role"] != b["role"] for a, b in itertools.pairwise(turns))
    for i, turn in enumerate(turns):
        blocks = blocks_of(turn)
        assert all(b["text"].strip() for b in blocks if b["type"] == "text")
        results = [b["tool_use_id"] for b in blocks if b["type"] == "tool_result"]
        kinds = [b["type"] for b in blocks]
        assert kinds[: len(results)] == ["tool_result"] * len(results)  # results lead
        if results:
            before = {b["id"] for b in blocks_of(turns[i - 1]) if b["type"] == "tool_use"}
            assert set(results) == before
