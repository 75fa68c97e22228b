"""Headlines: the one-line milestone a model ends each response with.

Format: ``⟦task | status: outcome; next: action | anchors: exact retrieval terms⟧``.

The line is parsed off the response, stored on the model turn (``Event.headline``), and
stripped from the text the model and the console show. When a span is evicted, its turns'
headlines become the eviction index's anchors; a turn without one shows ``(no milestone)``.
A response without the line is ``missing``; a line that opens with ``⟦`` but does not have the
three parts is ``malformed``: both are recorded (the console's headline-quality alert counts
them) and the malformed line is still stripped, since it was meant for the index.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "NO_MILESTONE",
    "Headline",
    "HeadlineParse",
    "HeadlineQuality",
    "format_headline",
    "parse_headline",
    "shorten",
    "unwrap",
]

OPEN, CLOSE = "⟦", "⟧"
NO_MILESTONE = "(no milestone)"
# Longest headline kept whole; a runaway line is cut here (the index shortens further).
MAX_HEADLINE_CHARS = 400

HeadlineQuality = Literal["ok", "missing", "malformed"]

_STATUS = re.compile(r"^\s*status\s*:\s*(?P<status>.*?)\s*;\s*next\s*:\s*(?P<next>.*?)\s*$", re.I)
_ANCHORS = re.compile(r"^\s*anchors\s*:\s*(?P<anchors>.*?)\s*$", re.I)


@dataclass(frozen=True)
class Headline:
    task: str
    status: str
    next: str
    anchors: tuple[str, ...]

    def format(self) -> str:
        return format_headline(self.task, self.status, self.next, self.anchors)

    def __str__(self) -> str:
        return self.format()


@dataclass(frozen=True)
class HeadlineParse:
    """What ``parse_headline`` found.

    ``headline`` is set only when ``quality == "ok"``; ``raw`` is the headline line as written
    (also for a malformed one); ``text`` is the response with that line removed.
    """

    headline: Headline | None
    quality: HeadlineQuality
    text: str
    raw: str | None = None

    @property
    def stored(self) -> str | None:
        """What to store in ``Event.headline``: the normalised line, or None."""
        return self.headline.format() if self.headline is not None else None


def format_headline(task: str, status: str, next: str, anchors: tuple[str, ...] | list[str]) -> str:
    """The canonical one-line form; separators inside the parts are replaced so it re-parses."""
    clean_anchors = ", ".join(a for a in (_clean(x, ",") for x in anchors) if a)
    return (
        f"{OPEN}{_clean(task)} | status: {_clean(status, ';')}; next: {_clean(next, ';')}"
        f" | anchors: {clean_anchors}{CLOSE}"
    )


def parse_headline(text: str) -> HeadlineParse:
    """Find the headline line (the last line containing ``⟦``), parse it, and strip it."""
    if not text:
        return HeadlineParse(None, "missing", text or "")
    lines = text.split("\n")
    at = next((i for i in range(len(lines) - 1, -1, -1) if OPEN in lines[i]), None)
    if at is None:
        return HeadlineParse(None, "missing", text)
    line = lines[at]
    before, _, marked = line.partition(OPEN)
    close = marked.rfind(CLOSE)
    if close < 0:
        body, after = marked, ""
    else:
        body, after = marked[:close], marked[close + 1 :]
    kept = [*lines[:at]]
    rest = (before.rstrip() + (" " + after.strip() if after.strip() else "")).rstrip()
    if rest:
        kept.append(rest)
    kept.extend(lines[at + 1 :])
    stripped = "\n".join(kept).rstrip()
    raw = (OPEN + marked[: close + 1] if close >= 0 else OPEN + marked).strip()
    headline = _parse_body(body) if close >= 0 else None
    if headline is None:
        return HeadlineParse(None, "malformed", stripped, raw[:MAX_HEADLINE_CHARS])
    return HeadlineParse(headline, "ok", stripped, raw[:MAX_HEADLINE_CHARS])


def shorten(headline: str, max_chars: int) -> str:
    """Cut a headline to ``max_chars``, keeping its opening (the task) and marking the cut."""
    if len(headline) <= max_chars:
        return headline
    if max_chars < 2:
        return "…"
    return headline[: max_chars - 1].rstrip() + "…"


def unwrap(headline: str) -> str:
    """The headline without its ``⟦ ⟧`` brackets (how the index shows it)."""
    return headline.strip().removeprefix(OPEN).removesuffix(CLOSE).strip()


def _parse_body(body: str) -> Headline | None:
    parts = body.split("|")
    if len(parts) != 3:
        return None
    task = parts[0].strip()
    status = _STATUS.match(parts[1])
    anchors = _ANCHORS.match(parts[2])
    if not task or status is None or anchors is None:
        return None
    if not status["status"] or not status["next"]:
        return None
    terms = tuple(t.strip() for t in anchors["anchors"].split(",") if t.strip())
    return Headline(
        task=task[:MAX_HEADLINE_CHARS],
        status=status["status"],
        next=status["next"],
        anchors=terms,
    )


def _clean(text: str, *extra: str) -> str:
    out = " ".join(str(text).split())
    for ch in ("|", OPEN, CLOSE, *extra):
        out = out.replace(ch, "/")
    return out
