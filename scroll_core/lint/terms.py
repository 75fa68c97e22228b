"""Content terms of a text, for the rules that compare a request, a reply and the events read:
the search's own terms (stop words dropped, case folded), each cut to a crude stem so that
"painting" and "paint", "moved" and "move" count as one term."""

from __future__ import annotations

from ..store.fts_query import STOP_WORDS, tokens

__all__ = ["share", "stem", "terms"]

_SUFFIXES = ("ingly", "ings", "ing", "ies", "ied", "ed", "es", "ly", "s")
# Markup the loop and the index put around text, never content.
_MARKS = frozenset({"seq", "status", "next", "anchors"})


def stem(word: str) -> str:
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def terms(text: str | None) -> frozenset[str]:
    """The stemmed content terms of ``text`` (no stop words, no single characters)."""
    if not text:
        return frozenset()
    return frozenset(
        stem(w) for w in tokens(text) if w not in STOP_WORDS and w not in _MARKS and len(w) > 1
    )


def share(wanted: frozenset[str], found: frozenset[str]) -> float:
    """The share of ``wanted``'s terms that ``found`` holds (0 when ``wanted`` is empty)."""
    return len(wanted & found) / len(wanted) if wanted else 0.0
