"""OpenAI Conversations API <-> the gateway's shapes: a conversation object, its metadata
checked as the API bounds it, and its items, which are the messages of its session's chain
(read back from the Event Log) listed as ``responses_api.input_items`` lists a response's
input. Deleting an item gives the messages without it; the server makes them the chain (a
rewrite from the item on: what the chain held stays in the log).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ..errors import GatewayRequestInvalid
from ._types import ClientMessage
from .responses_api import input_items

__all__ = [
    "MAX_ITEMS_PER_CALL",
    "conversation_object",
    "item_list",
    "new_conversation_id",
    "parse_metadata",
    "without_item",
]

# The API's bounds: items added per call, metadata pairs, and a key's and a value's length.
MAX_ITEMS_PER_CALL = 20
MAX_METADATA = 16
MAX_KEY = 64
MAX_VALUE = 512


def new_conversation_id() -> str:
    return f"conv_{uuid.uuid4().hex}"


def parse_metadata(raw: Any) -> dict[str, str]:
    """A conversation's ``metadata``: at most 16 pairs of strings (keys up to 64 characters,
    values up to 512); None is none."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise GatewayRequestInvalid("metadata", "must be an object of string values")
    if len(raw) > MAX_METADATA:
        raise GatewayRequestInvalid("metadata", f"holds at most {MAX_METADATA} pairs")
    for key, value in raw.items():
        if not isinstance(key, str) or not key or len(key) > MAX_KEY:
            raise GatewayRequestInvalid("metadata", f"keys are 1-{MAX_KEY} characters")
        if not isinstance(value, str) or len(value) > MAX_VALUE:
            raise GatewayRequestInvalid(
                f"metadata.{key}", f"must be a string of at most {MAX_VALUE} characters"
            )
    return dict(raw)


def conversation_object(
    conversation_id: str, created_at: float | None, metadata: dict[str, str]
) -> dict[str, Any]:
    return {
        "id": conversation_id,
        "object": "conversation",
        "created_at": int(created_at if created_at is not None else time.time()),
        "metadata": metadata,
    }


def item_list(items: list[dict[str, Any]]) -> dict[str, Any]:
    """Items as one whole list (what adding items answers)."""
    return {
        "object": "list",
        "data": items,
        "first_id": items[0]["id"] if items else None,
        "last_id": items[-1]["id"] if items else None,
        "has_more": False,
    }


def without_item(
    conversation: Sequence[tuple[int, ClientMessage]], item_id: str
) -> list[ClientMessage] | None:
    """The conversation's messages without the item ``item_id`` (None: no such item). A
    function call is taken out of its assistant message; a message left with neither text
    nor calls goes too."""
    out: list[ClientMessage] = []
    found = False
    for seq, message in conversation:
        ids = [item["id"] for item in input_items([(seq, message)])]
        if item_id not in ids:
            out.append(message)
            continue
        found = True
        if item_id.startswith("fc_"):
            index = int(item_id.rsplit("_", 1)[1])
            calls = tuple(c for j, c in enumerate(message.tool_calls) if j != index)
            kept = replace(message, tool_calls=calls)
        elif message.role == "assistant" and message.tool_calls:
            kept = replace(message, content="")  # its text goes, its calls stay
        else:
            continue
        if kept.content or kept.tool_calls:
            out.append(kept)
    return out if found else None
