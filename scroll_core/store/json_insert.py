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

from .ingest_rows import exact_json_values

__all__ = ["JSON_ROWS_SELECT", "json_insert_works", "json_rows"]

_WIDTH = 17  # the values of an events row the append path writes
# The rows of the JSON array bound to the one parameter, each as its 17 values, in order.
JSON_ROWS_SELECT = (
    f"SELECT {', '.join(f'value->>{i}' for i in range(_WIDTH))} FROM json_each(?) ORDER BY key"
)
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
    # Each value's type, and an integer's range: one comes back as one only within
    # SQLite's 64 bits (a larger one as a REAL, where ``executemany`` refuses it).
    if not values or not exact_json_values(values, _WIDTH):
        return None
    # orjson (UTF-8, about five times the standard library's speed here) refuses a lone
    # surrogate, which is not text: then row by row, where SQLite refuses it as before.
    try:
        text = orjson.dumps(values).decode()
    except TypeError:  # (orjson.JSONEncodeError)
        return None
    # NUL in a text (or those six characters: row by row too); most arrays hold no
    # backslash at all, which one memchr finds.
    if "\\" in text and "\\u0000" in text:
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
