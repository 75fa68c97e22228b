"""Content terms of a text, for the rules that compare a request, a reply and the events read:
the search's own terms (stop words dropped, case folded), each cut to a crude stem so that
"painting" and "paint", "moved" and "move" count as one term.

The live lint judges a session's new turns against its recent history every time it runs, so
the same event texts come back again and again: ``terms`` remembers the terms of the last
``CACHED_TEXTS`` texts it was asked about, keyed by a digest of the text (the texts
themselves, tool outputs among them, are not kept)."""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict

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


CACHED_TEXTS = 8192
_cache: OrderedDict[bytes, frozenset[str]] = OrderedDict()
_lock = threading.Lock()


def terms(text: str | None) -> frozenset[str]:
    """The stemmed content terms of ``text`` (no stop words, no single characters)."""
    if not text:
        return frozenset()
    key = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
    with _lock:
        found = _cache.get(key)
        if found is not None:
            _cache.move_to_end(key)
            return found
    found = frozenset(
        stem(w) for w in tokens(text) if w not in STOP_WORDS and w not in _MARKS and len(w) > 1
    )
    with _lock:
        _cache[key] = found
        while len(_cache) > CACHED_TEXTS:
            _cache.popitem(last=False)
    return found


def share(wanted: frozenset[str], found: frozenset[str]) -> float:
    """The share of ``wanted``'s terms that ``found`` holds (0 when ``wanted`` is empty)."""
    return len(wanted & found) / len(wanted) if wanted else 0.0
