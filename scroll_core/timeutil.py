"""Timestamps as the Event Log stores them: ISO-8601 UTC with fixed width.

Every ``created_at`` is written as ``YYYY-MM-DDTHH:MM:SS.ffffffZ`` so that plain string
comparison in SQL orders and bounds them correctly.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime

__all__ = ["format_ts", "now_ts", "parse_ts"]

_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"
# A UTC timestamp already written the stored way but perhaps without its microseconds, from
# year 1000 on: once ``fromisoformat`` has accepted it (a real date and time), its stored
# form is its own characters, so no datetime has to be formatted (``isoformat`` is most of
# the cost of storing a timestamp, once per appended event). Hours stop at 23 whatever a
# Python's ``fromisoformat`` makes of 24:00.
_STORED_SHAPE = re.compile(
    r"[1-9][0-9]{3}-[0-9]{2}-[0-9]{2}T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]"
    r"(\.[0-9]{6})?(?:Z|\+00:00)"
)


def parse_ts(value: str | datetime | date) -> datetime:
    """Parse a timestamp or date into an aware UTC datetime (naive input is taken as UTC).

    Raises ValueError with the offending value when it is not a timestamp.
    """
    if isinstance(value, datetime):
        dt = value
    elif isinstance(value, date):
        dt = datetime(value.year, value.month, value.day)
    elif isinstance(value, str):
        text = value.strip()
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        try:
            dt = datetime.fromisoformat(text)
        except ValueError:
            raise ValueError(f"not an ISO-8601 timestamp: {value!r}") from None
    else:
        raise ValueError(f"not a timestamp: {value!r} ({type(value).__name__})")
    if dt.tzinfo is None:
        return dt.replace(tzinfo=UTC)
    return dt.astimezone(UTC)


def format_ts(value: str | datetime | date) -> str:
    """Normalise a timestamp to the stored fixed-width UTC form."""
    if type(value) is str:
        # Once per appended event: a string ``fromisoformat`` reads as it stands (it reads
        # "Z" itself) skips ``parse_ts``'s stripping and rewriting; the rest goes there.
        try:
            dt = datetime.fromisoformat(value)
        except ValueError:
            pass
        else:
            shape = _STORED_SHAPE.fullmatch(value)
            if shape is not None:
                return value[:19] + (shape[1] or ".000000") + "Z"
            if dt.tzinfo is None:
                dt = dt.replace(tzinfo=UTC)
            elif dt.tzinfo is not UTC:
                dt = dt.astimezone(UTC)
            return _stored(dt)
    return _stored(parse_ts(value))


def now_ts() -> str:
    return _stored(datetime.now(UTC))


def _stored(dt: datetime) -> str:
    """``dt`` (aware, UTC) as ``_FORMAT`` gives it. ``isoformat`` is the same text from year
    1000 on, and made without ``strftime``'s format parsing (once per appended event)."""
    if dt.year < 1000:
        return dt.strftime(_FORMAT)
    return dt.isoformat(timespec="microseconds")[:26] + "Z"
