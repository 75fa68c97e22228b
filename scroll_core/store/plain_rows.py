"""The common chunk of appended events validated column by column, in C where it can be.

``_EventLogBase._prepare`` checks an event field by field, once per event: a dozen lookups,
branches and calls in Python for each of the millions a long-lived agent appends. Most
chunks hold only plain events (string ids and names in ASCII, ASCII content that fits the
row, no payload, timestamps already in the stored shape or none), and for those the checks
need no per-field messages: a set of the field names, then each event's ids, names and
content checked in one compiled pass (``ingest_rows.plain_tuples``: type checks, one join
scanned for non-ASCII and NUL), one regular expression over the joined timestamps. Only
``dict`` events take it (another mapping goes event by event). ``plain_values`` returns
exactly the values ``_prepare`` would, or None as soon as anything is not plain; the caller
then prepares the chunk event by event, which says what is wrong with which event. It
never raises.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from itertools import chain
from typing import Any

from ..timeutil import now_ts
from .ingest_rows import plain_tuples

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
_STR = frozenset({str})
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

    def computed(events: list[Any]) -> tuple[list[Any], list[Any], list[Any]]:
        """The chunk's tool_input, metadata and created_at columns, once its ids, names
        and content are known to be plain."""

        def column(key: str) -> list[Any]:
            return [event.get(key) for event in events] if key in keys else nones

        return (
            _tool_inputs(column("tool_input")) if "tool_input" in keys else nones,
            _metadata(column("metadata")) if "metadata" in keys else ["{}"] * n,
            _created_at(column("created_at")),
        )

    # Event by event in one compiled pass (``ingest_rows``): a dozen dict lookups and type
    # checks each, cheaper there than a column of each in the interpreter.
    rows = plain_tuples(list(events), payload_threshold, text_holds_nul, computed)
    if rows is None:
        raise _NotPlain
    return rows


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
