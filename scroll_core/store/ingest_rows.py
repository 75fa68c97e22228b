"""The append path's per-row loop, written for mypyc (``native.COMPILED``).

An append of the common event costs, besides its INSERT, a few microseconds of Python per
row: summing its words' token counts (``token_sums``, compiled too), and checking that its
values survive the JSON insert, here. That check is a loop over rows and their values that
CPython runs one bytecode at a time; compiled (``docs/native.md``), the type checks are
pointer comparisons. This source is the reference and the fallback: its caller gets the
same answers either way (``tests/test_native.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["exact_json_values"]

_INT_MIN = -(2**63)
_INT_MAX = 2**63 - 1


def exact_json_values(values: Sequence[tuple[Any, ...]], width: int) -> bool:
    """Whether every row of ``values`` has ``width`` values, each a ``str``, an ``int``
    (not a ``bool``) within SQLite's 64 bits, or None, and no column holds both texts and
    integers: the values a JSON array gives back exactly through ``json_each`` and ``->>``
    (``json_insert.json_rows``)."""
    # Per column: 1 once it holds a text, 2 once it holds an integer.
    kinds = [0] * width
    for row in values:
        if len(row) != width:
            return False
        for i in range(width):
            value = row[i]
            if value is None:
                continue
            kind = type(value)
            if kind is str:
                kinds[i] |= 1
            elif kind is int:
                number: int = value
                if number < _INT_MIN or number > _INT_MAX:
                    return False
                kinds[i] |= 2
            else:
                return False
    return 3 not in kinds
