"""What the two schemas of the Event Log share (``sqlite_schema``, ``pg_schema``): the words
of every refusal to change history, and the 64-bit range of the integers both store."""

from __future__ import annotations

__all__ = ["APPEND_ONLY_MESSAGE", "SQLITE_INT_MAX", "sqlite_int"]

# Both databases raise it (SQLite's triggers, PostgreSQL's with SQLSTATE SC001), and both
# backends turn it into ``AppendOnlyViolation``.
APPEND_ONLY_MESSAGE = "scroll event log is append-only"
# SQLite stores INTEGER in 64 bits, as PostgreSQL does BIGINT; a bigger Python int cannot
# even be bound as a parameter.
SQLITE_INT_MAX = 2**63 - 1


def sqlite_int(value: int) -> int:
    """``value`` as an int SQLite (or a PostgreSQL BIGINT) can bind, clamped to its 64-bit
    range.

    For seq cursors and limits clamping keeps the meaning: no seq lies beyond the range, so
    "after 10**30" and "after SQLITE_INT_MAX" select the same nothing.
    """
    return max(-SQLITE_INT_MAX - 1, min(SQLITE_INT_MAX, int(value)))
