"""Many rows in one INSERT statement on SQLite: the rows as one JSON array, read back by
``json_each``.

``executemany`` runs its statement once per row, and each run pays SQLite's start and end
of a statement (with the log's triggers, which may abort it) and the binding of every
parameter from Python; ``INSERT ... SELECT ... FROM json_each(?)`` runs once for the lot,
the triggers firing per row as before. Measured on the Event Log's schema (1,000-event
batches in 50-row statements), it took about 30 µs of CPU an event against 50 for
``executemany``, and it releases the GIL for the whole statement instead of once per row.

It is used only where the JSON round trip is exact: every value a ``str``, an ``int`` (not a
``bool``) or None, no NUL in any text (SQLite's JSON functions stop a text at one), text
that is valid UTF-8 (orjson, which encodes the array, refuses a lone surrogate), and a
SQLite whose ``json_each`` and ``->>`` give back a probe of awkward text, integers and null
as they went in (``json_insert_works``). Anything else goes through ``executemany``, row by
row.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

import orjson

__all__ = ["JSON_ROWS_SELECT", "json_insert_works", "json_rows"]

_WIDTH = 17  # the values of an events row the append path writes
# The rows of the JSON array bound to the one parameter, each as its 17 values, in order.
JSON_ROWS_SELECT = (
    f"SELECT {', '.join(f'value->>{i}' for i in range(_WIDTH))} FROM json_each(?) ORDER BY key"
)
_EXACT_TYPES = frozenset({str, int, type(None)})
_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1
# Text that JSON escapes or that is not ASCII: quotes, backslashes, control characters,
# DEL, two- to four-byte UTF-8, and what looks like a number or JSON itself.
_PROBE: tuple[Any, ...] = (
    'q"uo\\te/ \n\r\t\b\f \x01\x1f\x7f',
    "é 漢字 😀 \u2028\u2029 \ufeff",
    "12",
    '[1, {"a": null}]',
    "",
    0,
    -1,
    2**62,
    None,
    " spaced ",
    "1e5",
    "true",
    "null",
    "\\u0041",
    "x" * 1000,
    7,
    1,
)


def json_rows(values: Sequence[tuple[Any, ...]]) -> str | None:
    """``values`` as the JSON array ``JSON_ROWS_SELECT`` reads back exactly, or None when a
    value would not come back as it is (then insert them row by row)."""
    if not values or any(len(row) != _WIDTH for row in values):
        return None
    # Each column's types at once; an integer comes back as one only within SQLite's 64
    # bits (a larger one as a REAL, where ``executemany`` refuses it).
    for column in zip(*values, strict=True):
        types = set(map(type, column))
        if not _EXACT_TYPES.issuperset(types):
            return None
        if int in types:
            if str in types:
                return None
            ints = [value for value in column if value is not None]
            if not _INT_MIN <= min(ints) <= max(ints) <= _INT_MAX:
                return None
    # orjson (UTF-8, about five times the standard library's speed here) refuses a lone
    # surrogate, which is not text: then row by row, where SQLite refuses it as before.
    try:
        text = orjson.dumps(values).decode()
    except TypeError:  # (orjson.JSONEncodeError)
        return None
    if "\\u0000" in text:  # NUL in a text (or those six characters: row by row too)
        return None
    return text


def json_insert_works(db: sqlite3.Connection) -> bool:
    """Whether this SQLite gives ``JSON_ROWS_SELECT``'s rows back exactly as they went in
    (``json_each`` and ``->>`` need SQLite 3.38 with its JSON functions)."""
    rows = [_PROBE, tuple(v[::-1] if isinstance(v, str) else v for v in _PROBE)]
    text = json_rows(rows)
    if text is None:
        return False
    try:
        back = db.execute(JSON_ROWS_SELECT, (text,)).fetchall()
    except sqlite3.Error:
        return False
    return back == rows and all(
        type(a) is type(b)
        for row, got in zip(rows, back, strict=True)
        for a, b in zip(row, got, strict=True)
    )
