"""Calendar dates a search query names, for the ranker's date features.

A question that names a day ("what did we decide on 13 October 2023?") or a month ("the
bug from March 2024") is about what happened then, so turns logged on that day or in that
month are likelier to answer it. This finds the dates written out in full, in the forms
people and models write them, and nothing vaguer:

- day: ``13 October 2023``, ``13th of Oct, 2023``, ``October 13, 2023``, ``2023-10-13``;
- month: ``October 2023``, ``Oct. 2023``, ``2023-10``, and the month of every day found.

A date without its year ("on October 13") or relative to now ("last Tuesday") is not
resolved: the log has no "now" that the question shares, and a wrong guess would lift the
wrong turns. An impossible date (``31 February 2023``) is ignored, its month too. Dates
compare as the Event Log writes ``created_at`` (UTC, ``YYYY-MM-DD``): a string prefix.

Regular expressions rather than a date library: ``dateutil``'s fuzzy parser finds at most
one date per text and reads bare numbers as days, which in a question about versions or
counts would invent dates.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from datetime import date

__all__ = ["DateMention", "NamedDates", "date_mentions", "named_dates"]

_MONTHS = {
    name: number
    for number, names in enumerate(
        (
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ),
        start=1,
    )
    for name in names
}
_MONTH = r"(?P<month>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>(?:19|20)\d\d)"
_B = r"(?<![\w.-])"  # no letter, digit, dot or hyphen just before ("v2.2023-10")
_E = r"(?![\w-])"  # nor just after

_PATTERNS = tuple(
    re.compile(pattern, re.IGNORECASE)
    for pattern in (
        # 13 October 2023, 13th of Oct, 2023
        rf"{_B}{_DAY}\s+(?:of\s+)?{_MONTH},?\s+{_YEAR}{_E}",
        # October 13, 2023; Oct 13th 2023
        rf"{_B}{_MONTH}\s+{_DAY},?\s+{_YEAR}{_E}",
        # 2023-10-13 (also the date part of an ISO timestamp)
        rf"{_B}{_YEAR}-(?P<nmonth>[01]\d)-(?P<day>[0-3]\d)(?![\d-])",
        # October 2023, Oct. 2023
        rf"{_B}{_MONTH},?\s+{_YEAR}{_E}",
        # 2023-10
        rf"{_B}{_YEAR}-(?P<nmonth>[01]\d){_E}",
    )
)


@dataclass(frozen=True)
class NamedDates:
    """The days (``YYYY-MM-DD``) and months (``YYYY-MM``, each day's month included) a text
    names."""

    days: frozenset[str]
    months: frozenset[str]

    def __bool__(self) -> bool:
        return bool(self.months)


@dataclass(frozen=True)
class DateMention:
    """One date written out in ``text[start:end]``: a day (``YYYY-MM-DD``) or, when
    ``day`` is None, a month (``YYYY-MM``)."""

    start: int
    end: int
    month: str
    day: str | None


def date_mentions(text: str) -> list[DateMention]:
    """Every date ``named_dates`` reads in ``text``, where it is written, in text order. A
    day's month is not a mention of its own; an impossible day is not a mention at all."""
    found_at: list[DateMention] = []
    taken: list[tuple[int, int]] = []
    for pattern in _PATTERNS:
        for found in pattern.finditer(text):
            start, end = found.span()
            if any(start < e and s < end for s, e in taken):
                continue  # part of a day already read ("October 2023" in "October 13, 2023")
            parts = found.groupdict()
            year = int(parts["year"])
            month = int(parts["nmonth"]) if parts.get("nmonth") else _MONTHS[parts["month"].lower()]
            if not 1 <= month <= 12:
                continue
            day = None
            if parts.get("day"):
                try:
                    day = date(year, month, int(parts["day"])).isoformat()
                except ValueError:
                    taken.append((start, end))  # not a day, and its month not meant either
                    continue
            taken.append((start, end))
            found_at.append(DateMention(start, end, f"{year:04d}-{month:02d}", day))
    return sorted(found_at, key=lambda m: m.start)


@functools.lru_cache(maxsize=1024)
def named_dates(text: str) -> NamedDates:
    """Every calendar day and month written out in full in ``text`` (see the module's
    docstring for the forms); empty when there is none."""
    mentions = date_mentions(text)
    return NamedDates(
        frozenset(m.day for m in mentions if m.day),
        frozenset(m.month for m in mentions),
    )
