"""The common chunk of appended events validated column by column, in C where it can be.

``_EventLogBase._prepare`` checks an event field by field, once per event: a dozen lookups,
branches and calls in Python for each of the millions a long-lived agent appends. Most
chunks hold only plain events (string ids and names in ASCII, ASCII content that fits the
row, no payload, timestamps already in the stored shape or none), and for those every check
can run once per column: a set of the field names, a set of the value types, one join
scanned for non-ASCII and NUL, one regular expression over the joined timestamps, and the
row tuples made by ``zip``. ``plain_values`` does that and returns exactly the values
``_prepare`` would, or None as soon as anything is not plain; the caller then prepares the
chunk event by event, which says what is wrong with which event. It never raises.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from itertools import chain
from typing import Any

from ..timeutil import now_ts

__all__ = ["APPEND_KEYS", "plain_values"]

# The fields an appended event may carry.
APPEND_KEYS = frozenset(
    {
        "session_id",
        "kind",
        "content",
        "role",
        "agent_id",
        "name",
        "tool_call_id",
        "tool_input",
        "payload",
        "headline",
        "metadata",
        "created_at",
        "dedup_key",
        "searchable",
    }
)
_OPTIONAL = ("role", "name", "tool_call_id", "headline", "dedup_key")
_STR = frozenset({str})
_STR_OR_NONE = frozenset({str, type(None)})
# ``timeutil._STORED_SHAPE``, one per line: a column of timestamps joined by newlines
# matches it whole only when every one is in the shape (none can hold a newline).
_SHAPE = (
    r"[1-9][0-9]{3}-[0-9]{2}-[0-9]{2}T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]"
    r"(?:\.[0-9]{6})?(?:Z|\+00:00)"
)
_SHAPES = re.compile(rf"(?:{_SHAPE}\n)*{_SHAPE}")


class _NotPlain(Exception):
    """A value the per-event path must see (it has the message for it)."""


def plain_values(
    events: Sequence[Mapping[str, Any]], payload_threshold: int, text_holds_nul: bool
) -> list[tuple[Any, ...]] | None:
    """The value tuples ``_prepare`` makes of ``events`` (session_id, agent_id, kind, role,
    name, content, tool_call_id, tool_input, payload_ref, payload_size, payload_media,
    headline, metadata, created_at, dedup_key, searchable), or None when one event is not
    plain. ``text_holds_nul``: whether content may keep NUL (SQLite) or must be routed."""
    try:
        return _values(events, payload_threshold, text_holds_nul)
    except _NotPlain:
        return None
    except (TypeError, ValueError, AttributeError):  # an odd value met by a C helper
        return None


def _values(
    events: Sequence[Mapping[str, Any]], payload_threshold: int, text_holds_nul: bool
) -> list[tuple[Any, ...]]:
    n = len(events)
    if not n:
        return []
    keys = set(chain.from_iterable(events))
    if not APPEND_KEYS.issuperset(keys):
        raise _NotPlain
    nones: list[Any] = [None] * n

    def column(key: str) -> list[Any]:
        return [event.get(key) for event in events] if key in keys else nones

    session_ids = column("session_id")
    kinds = column("kind")
    agent_ids = column("agent_id") if "agent_id" in keys else ["main"] * n
    if not all(agent_ids):
        agent_ids = [agent_id or "main" for agent_id in agent_ids]
    optional = [column(key) for key in _OPTIONAL]
    # Required ids: strings, none blank; optional ones strings or None; all ASCII, no NUL.
    if set(map(type, chain(session_ids, kinds, agent_ids))) != _STR:
        raise _NotPlain
    if not _STR_OR_NONE.issuperset(map(type, chain.from_iterable(optional))):
        raise _NotPlain
    if "" in session_ids or "" in kinds:
        raise _NotPlain
    if any(map(str.isspace, chain(session_ids, kinds))):
        raise _NotPlain
    joined = "".join(chain(session_ids, kinds, agent_ids, filter(None, chain(*optional))))
    if not joined.isascii() or "\x00" in joined:
        raise _NotPlain

    contents = column("content")
    if set(map(type, contents)) != _STR or not all(map(str.isascii, contents)):
        raise _NotPlain
    if max(map(len, contents)) > payload_threshold:
        raise _NotPlain
    if not text_holds_nul and "\x00" in "".join(contents):
        raise _NotPlain
    if "payload" in keys and any(event.get("payload") is not None for event in events):
        raise _NotPlain

    role, name, tool_call_id, headline, dedup_key = optional
    return list(
        zip(
            session_ids,
            agent_ids,
            kinds,
            role,
            name,
            contents,
            tool_call_id,
            _tool_inputs(column("tool_input")) if "tool_input" in keys else nones,
            nones,
            nones,
            nones,
            headline,
            _metadata(column("metadata")) if "metadata" in keys else ["{}"] * n,
            _created_at(column("created_at")),
            dedup_key,
            [1 if event.get("searchable", True) else 0 for event in events]
            if "searchable" in keys
            else [1] * n,
            strict=True,
        )
    )


def _created_at(values: list[Any]) -> list[str]:
    """The stored timestamps: now for a column of None, the stored shape's own characters
    for a column of strings in it that ``fromisoformat`` accepts (``timeutil.format_ts``)."""
    if not any(values):
        if any(value is not None for value in values):
            raise _NotPlain  # an empty string or the like: format_ts refuses it
        return [now_ts() for _ in values]
    if set(map(type, values)) != _STR or not _SHAPES.fullmatch("\n".join(values)):
        raise _NotPlain
    for _ in map(datetime.fromisoformat, values):  # a real date and time (ValueError if not)
        pass
    # YYYY-MM-DDTHH:MM:SS then ".ffffff" or not, then "Z" or "+00:00": 20, 25, 27 or 32.
    return [v[:26] + "Z" if len(v) >= 27 else v[:19] + ".000000Z" for v in values]


def _metadata(values: list[Any]) -> list[str]:
    return [
        "{}" if not value else _json(dict(value)) if isinstance(value, Mapping) else _no(value)
        for value in values
    ]


def _tool_inputs(values: list[Any]) -> list[str | None]:
    return [None if value is None else _json(value) for value in values]


def _json(value: Any) -> str:
    # As ``log_common._to_json``; its errors (TypeError, ValueError) send the chunk back.
    return json.dumps(value, ensure_ascii=False, allow_nan=False)


def _no(value: Any) -> str:
    raise _NotPlain
