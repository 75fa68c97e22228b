"""The data a qualification generates for itself, from one seed: a table of orders and server
log lines for the kernel, and long conversations with facts planted in them for the Event Log.

Nothing here is read from a data set, and nothing is fitted to a model: the same seed gives
the same data, so two scorecards of one suite version saw the same items."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

__all__ = [
    "REGIONS",
    "Line",
    "conversation",
    "log_lines",
    "orders",
]

REGIONS = ("north", "south", "east", "west")
PATHS = ("/api/login", "/api/cart", "/api/search", "/api/orders", "/api/profile", "/health")
_TOPICS = (
    "the garden", "a cycling route", "the kitchen shelves", "a podcast episode", "the weather",
    "a spreadsheet at work", "weekend chores", "a film we watched", "the bus timetable",
    "an old camera", "the neighbours' fence", "a birthday card", "the laptop battery",
)  # fmt: skip
_REMARKS = (
    "I think it went fine overall, nothing special to report.",
    "It took longer than expected, but that is usual for this time of year.",
    "We argued a little about the details and then moved on.",
    "There is not much more to it than that, honestly.",
    "I wrote a few notes about it somewhere, not that they matter much.",
    "Maybe next month we will look at it again and decide.",
    "It reminded me of something similar from a while ago.",
)
_REPLIES = (
    "That sounds reasonable; keep an eye on it.",
    "Noted. Let me know if anything changes.",
    "Understood, thanks for the update.",
    "Sounds like a plan; no action needed from me right now.",
)


def orders(rng: random.Random, n: int = 400) -> list[dict[str, Any]]:
    """``n`` orders: id, region, amount (5 to 999) and customer (``c001`` to ``c060``)."""
    return [
        {
            "id": i + 1,
            "region": rng.choice(REGIONS),
            "amount": rng.randint(5, 999),
            "customer": f"c{rng.randint(1, 60):03d}",
        }
        for i in range(n)
    ]


def log_lines(rng: random.Random, n: int = 1500) -> list[str]:
    """``n`` access-log lines ``"<time> <METHOD> <path> <status> <ms>ms"``; one path (chosen
    by the seed) fails with 500 more often than the others."""
    worst = rng.choice(PATHS)
    start = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
    lines = []
    for i in range(n):
        path = rng.choice(PATHS)
        fail = 0.12 if path == worst else 0.04
        status = 500 if rng.random() < fail else rng.choice((200, 200, 200, 201, 304, 404))
        at = (start + timedelta(seconds=7 * i)).strftime("%Y-%m-%dT%H:%M:%S")
        method = "POST" if path in ("/api/login", "/api/orders") else "GET"
        lines.append(f"{at} {method} {path} {status} {rng.randint(3, 900)}ms")
    return lines


@dataclass(frozen=True)
class Line:
    """One message of a generated conversation: who says it, what, and when."""

    role: str  # user or assistant
    text: str
    at: datetime
    headline: str | None = None


def conversation(
    rng: random.Random,
    start: datetime,
    exchanges: int,
    planted: dict[int, str] | None = None,
    headlines: dict[int, str] | None = None,
) -> list[Line]:
    """``exchanges`` user/assistant pairs of small talk an hour apart; ``planted`` puts a
    sentence into the user message of the given exchanges, ``headlines`` a headline on the
    assistant message of the given exchanges."""
    planted = planted or {}
    headlines = headlines or {}
    lines = []
    for i in range(exchanges):
        at = start + timedelta(hours=i)
        topic = rng.choice(_TOPICS)
        text = f"About {topic}: {rng.choice(_REMARKS)} {rng.choice(_REMARKS)}"
        if i in planted:
            text = f"{text} {planted[i]}"
        lines.append(Line("user", text, at))
        lines.append(
            Line("assistant", rng.choice(_REPLIES), at + timedelta(minutes=1), headlines.get(i))
        )
    return lines
