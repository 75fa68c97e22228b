"""The extractive headline: when the upstream model writes no headline, one is built from
the request and the reply, so the eviction index still says what each span holds."""

from __future__ import annotations

import re
from collections.abc import Iterable

from ..headlines import format_headline

__all__ = ["extractive_headline"]

_TERM = re.compile(r"\b(?:[A-Z][\w'-]*(?:\s+[A-Z][\w'-]*)*|\d[\d,./:-]*\d|\d)\b|`[^`]{1,60}`")
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_STOP = frozenset({"I", "The", "A", "An", "It", "This", "That", "What", "How", "Can", "Please"})


def _first_sentence(text: str, limit: int) -> str:
    for part in _SENTENCE.split(text.strip()):
        part = " ".join(part.split())
        if part:
            return part if len(part) <= limit else part[: limit - 1].rstrip() + "…"
    return ""


def _anchors(texts: Iterable[str], limit: int = 6) -> list[str]:
    seen: list[str] = []
    for text in texts:
        for match in _TERM.finditer(text):
            term = match.group(0).strip("`").strip()
            if term and term not in _STOP and term not in seen:
                seen.append(term)
            if len(seen) >= limit:
                return seen
    return seen


def extractive_headline(request: str, reply: str, tool_names: Iterable[str] = ()) -> str:
    """A headline from the request's and the reply's own words (no model call)."""
    names = list(tool_names)
    task = _first_sentence(request, 80) or "continue the conversation"
    status = _first_sentence(reply, 120) or (f"called {', '.join(names)}" if names else "replied")
    next_step = f"use the results of {', '.join(names)}" if names else "answer the next request"
    return format_headline(task, status, next_step, _anchors((request, reply)))
