"""What ``compress`` and ``build_view`` read during a replay, served from memory.

``TraceLog`` answers the two reads they make of an Event Log (``session_events`` and
``tokens``) from the trace's events, only up to the current bound, so a compress sees the
session exactly as the recorded one did at that point. ``DigestStandIn`` and ``SizedCounter``
put a namespace digest of the recorded size into the view without its text (the log does not
keep the text; its token count is what the view's budget needs).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from ..store import Event
from ..tokens import TokenCounter
from ..view import DIGEST_HEADER

__all__ = ["DigestStandIn", "SizedCounter", "TraceLog"]

_MARK = "\x00scroll-replay-digest:"


class TraceLog:
    """The trace's events as the read side of an Event Log, cut at ``bound``."""

    def __init__(self, session_id: str, events: Sequence[Event], tokens: TokenCounter) -> None:
        self.session_id = session_id
        self.events = list(events)
        self.seqs = [e.seq for e in self.events]
        self.tokens = tokens
        self.bound = 0

    def session_events(
        self, session_id: str, after_seq: int = 0, limit: int | None = 100
    ) -> list[Event]:
        if session_id != self.session_id:
            return []
        lo = bisect.bisect_right(self.seqs, after_seq)
        hi = bisect.bisect_right(self.seqs, self.bound)
        out = self.events[lo:hi]
        return out if limit is None else out[: int(limit)]

    def upto(self, bound: int) -> list[Event]:
        return self.events[: bisect.bisect_right(self.seqs, bound)]


class DigestStandIn:
    """A digest known only by its size in the view (``digest_tokens`` as ``ViewReport``
    counts it: the section with its header, plus one)."""

    def __init__(self, tokens: int) -> None:
        self.tokens = tokens

    def render(self) -> str:
        return f"{_MARK}{self.tokens}" if self.tokens > 0 else ""


class SizedCounter:
    """A counter that gives a ``DigestStandIn``'s section its recorded size and counts
    everything else with ``inner``."""

    def __init__(self, inner: TokenCounter) -> None:
        self.inner = inner
        # Keep the name, so caches keyed by counter name are shared with the recorded run.
        self.name = getattr(inner, "name", type(inner).__name__)

    def count(self, text: str) -> int:
        head = f"{DIGEST_HEADER}\n{_MARK}"
        if text.startswith(head):
            return max(0, int(text[len(head) :]) - 1)
        return self.inner.count(text)

    def count_many(self, texts: Sequence[str]) -> list[int]:
        return [self.count(t) for t in texts]
