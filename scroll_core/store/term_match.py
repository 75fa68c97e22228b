"""Which query terms a turn's text holds, found once per search for every turn it reads.

A query term is found in a turn by its stem prefix (``fts_query.stem_prefix``): a word
holds term ``i`` when, case-folded, it starts with that term's prefix, and a word that
starts with several holds the first. The ranker reads this for every turn a search reads
(the candidates and the turns beside them, about 150), twice: which terms each turn holds
(``held``: coverage, window coverage, rarity) and where they stand (``positions``:
proximity).

Matching the case-insensitive prefix pattern at every character of every turn in Python's
``re`` was most of a search's time on a small log. For ASCII text and ASCII prefixes of which
none starts another (so a word can start with one prefix at most), a turn holds term ``i``
exactly when its lowered text has the prefix at a word start: the texts of a search are
lowered and joined once, and each prefix is found with ``str.find``, in C, checking only the
character before each place it occurs. Any other text or query takes the pattern
(``fts_query.term_words``) word by word, as before: Unicode case folding can match a prefix
where ASCII lowering would not.
"""

from __future__ import annotations

import itertools
import re
from bisect import bisect_right

from . import fts_query

__all__ = ["TermMatcher", "mask_terms"]

# A word of ASCII text, as FTS5's unicode61 (and ``fts_query.WORDS``) splits it.
_ASCII_WORD = re.compile(r"[A-Za-z0-9]+")


class TermMatcher:
    """Finds ``terms`` in the texts of one search (what it learns of each word is dropped
    with the search)."""

    def __init__(self, terms: list[str]) -> None:
        self.terms = terms
        self.prefixes = [fts_query.stem_prefix(t) for t in terms]
        self._starts = tuple(self.prefixes)
        self._fast = all(p.isascii() for p in self.prefixes) and not any(
            i != j and a.startswith(b)
            for i, a in enumerate(self.prefixes)
            for j, b in enumerate(self.prefixes)
        )
        # The pattern path's: each word the pattern found -> its term (or None).
        self._seen: dict[str, int | None] = {}
        self._heads = {p[:4] for p in self.prefixes}
        self._head_sizes = {min(len(p), 4) for p in self.prefixes}

    def held_all(self, texts: list[str]) -> list[int]:
        """The terms each of ``texts`` holds, as bit masks (bit ``i``: term ``i``)."""
        masks = [0] * len(texts)
        plain = [i for i, text in enumerate(texts) if text.isascii()] if self._fast else []
        if len(plain) < len(texts):
            for index in set(range(len(texts))).difference(plain):
                masks[index] = self._held_by_pattern(texts[index])
        if not plain:
            return masks
        # One lowered text, the turns separated by a newline (never part of a prefix, and
        # a word start): starts[r] is where turn plain[r] begins.
        kept = texts if len(plain) == len(texts) else [texts[index] for index in plain]
        starts: list[int] = []
        at = 0
        for text in kept:
            starts.append(at)
            at += len(text) + 1
        lowered = "\n".join(kept).lower()
        last = len(starts) - 1
        for which, prefix in enumerate(self.prefixes):
            bit = 1 << which
            found = lowered.find(prefix)
            while found >= 0:
                if found == 0 or not lowered[found - 1].isalnum():
                    turn = bisect_right(starts, found) - 1
                    masks[plain[turn]] |= bit
                    if turn == last:
                        break
                    found = lowered.find(prefix, starts[turn + 1])
                else:
                    found = lowered.find(prefix, found + 1)
        return masks

    def _held_by_pattern(self, text: str) -> int:
        mask = 0
        pattern = fts_query.term_words(self.terms)
        for word in set(pattern.findall(text)):
            found = self._seen.get(word, -1)
            if found == -1:
                folded = word.casefold()
                found = next((i for i, p in enumerate(self.prefixes) if folded.startswith(p)), None)
                self._seen[word] = found
            if found is not None:
                mask |= 1 << found
        return mask

    def plain(self, text: str) -> bool:
        """Whether ``text`` takes the ``str.find`` path: the mask ``held_all`` gives it then
        holds exactly the terms ``positions`` finds in it."""
        return self._fast and text.isascii()

    def closest(self, text: str) -> int:
        """For ``plain`` text: the smallest token gap between two words holding different
        terms (``positions``' nearest pair), 0 when fewer than two terms are held. The words
        holding a term are found with ``str.find`` (at most one prefix starts a word here)
        and only the tokens between two such words are counted."""
        lowered = text.lower()
        found_at: list[tuple[int, int]] = []
        for which, prefix in enumerate(self.prefixes):
            found = lowered.find(prefix)
            while found >= 0:
                if found == 0 or not lowered[found - 1].isalnum():
                    found_at.append((found, which))
                found = lowered.find(prefix, found + 1)
        found_at.sort()
        best = 0
        count = fts_query.WORDS.findall
        for (start, one), (end, other) in itertools.pairwise(found_at):
            if one != other:
                # The tokens starting in [start, end): the gap in token places.
                gap = len(count(lowered, start, end))
                if not best or gap < best:
                    best = gap
        return best

    def positions(self, text: str) -> list[tuple[int, int]]:
        """(token index, term index) of each token of ``text`` that holds a term, in order
        (tokens as FTS5's unicode61 splits them)."""
        if self._fast and text.isascii():
            starts, prefixes = self._starts, self.prefixes
            return [
                (at, next(i for i, p in enumerate(prefixes) if token.startswith(p)))
                for at, token in enumerate(fts_query.WORDS.findall(text.lower()))
                if token.startswith(starts)
            ]
        heads, sizes, prefixes = self._heads, self._head_sizes, self.prefixes
        out: list[tuple[int, int]] = []
        for at, token in enumerate(fts_query.tokens(text)):
            # Most tokens are turned away by a set lookup or two, before any prefix scan.
            if not any(token[:n] in heads for n in sizes):
                continue
            for index, prefix in enumerate(prefixes):
                if token.startswith(prefix):
                    out.append((at, index))
                    break
        return out

    def snippet(self, content: str, width: int = fts_query.SNIPPET_CHARS) -> str:
        """``fts_query.make_snippet(content, terms, width)``, the same text: for ASCII text the
        first word holding a term is found with ``str.find`` and the words of the window
        are bracketed by a fixed pattern, so no pattern is compiled for the query."""
        if not (self._fast and self.terms and content.isascii()):
            return fts_query.make_snippet(content, self.terms, width)
        lowered = content.lower()
        first = min(self._first_start(lowered, p) for p in self.prefixes)
        if first > len(content):
            return content[:width] + ("…" if len(content) > width else "")
        start = max(0, first - width // 3)
        end = min(len(content), start + width)
        window = content[start:end]
        # The words of the window that start with a prefix, bracketed: found with
        # ``str.find`` at word starts of the window (so a word the window cuts counts from
        # the cut, as a word of the window alone).
        lowered = lowered[start:end]
        marked = []
        for prefix in self.prefixes:
            found = lowered.find(prefix)
            while found >= 0:
                if found == 0 or not lowered[found - 1].isalnum():
                    marked.append(found)
                found = lowered.find(prefix, found + len(prefix))
        pieces: list[str] = []
        done = 0
        for at in sorted(marked):
            word = _ASCII_WORD.match(window, at)
            assert word is not None  # a prefix starts with a letter or digit
            pieces += (window[done:at], "[", word.group(0), "]")
            done = word.end()
        pieces.append(window[done:])
        return ("…" if start > 0 else "") + "".join(pieces) + ("…" if end < len(content) else "")

    @staticmethod
    def _first_start(lowered: str, prefix: str) -> int:
        """Where ``prefix`` first starts a word of ``lowered`` (ASCII), or a large number."""
        found = lowered.find(prefix)
        while found > 0 and lowered[found - 1].isalnum():
            found = lowered.find(prefix, found + 1)
        return found if found >= 0 else len(lowered) + 1


def mask_terms(mask: int) -> list[int]:
    """The term indices set in ``mask``, ascending."""
    out = []
    index = 0
    while mask:
        if mask & 1:
            out.append(index)
        mask >>= 1
        index += 1
    return out
