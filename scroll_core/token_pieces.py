"""Exact cl100k token counts of ASCII text at about three times tiktoken's speed on one
core (``tokens.TiktokenCounter`` uses it on the calling thread).

tiktoken splits a text with one regular expression and runs byte-pair merges on each
piece alone, so a text's count is the sum of its pieces' counts. Most pieces are common
words, so each short piece's count is kept in a bounded table and only a new piece goes to
tiktoken's own merge (``_encode_single_piece``). The split is cl100k's pattern written for
Python's ``re`` with its classes spelled out for ASCII (``\\p{L}`` is ``A-Za-z``, ``\\p{N}``
is ``0-9``, ``\\s`` is the six ASCII ``White_Space`` characters, which is not what ``re``'s
``\\s`` means, and ``$`` is ``\\Z``), so it is the same split only on ASCII text: anything
else goes to tiktoken whole. It is used only for the encoding whose pattern it was written
from, and only if it agrees with tiktoken on a probe.

Most texts are words between single spaces, and there the split needs no regular
expression: a piece never runs on over a space (the pieces that take whitespace start with
it, and the split looks only forward), so when the only whitespace is single spaces inside
the text, the pieces of ``w0 w1 w2`` are those of ``w0``, then of `` w1``, then of `` w2``.
Such a text is cut with ``str.split(" ")`` and its words' counts summed from two more
bounded tables (a word first, and a word after a space), by ``token_sums.word_sums``, which
is compiled (``docs/native.md``); a word not in them is counted by the pattern on its own.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from .token_sums import word_sums

__all__ = ["CL100K_PATTERN", "PieceCounter"]

# tiktoken's cl100k_base split (``Encoding._pat_str``), which the ASCII pattern below spells.
CL100K_PATTERN = (
    r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+"
    r"| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"
)
_S = r"[\t\n\x0b\x0c\r ]"
_NOT_S = r"[^\t\n\x0b\x0c\r ]"
_ASCII_SPLIT = re.compile(
    r"'(?i:[sdmt]|ll|ve|re)|[^\r\nA-Za-z0-9]?+[A-Za-z]++|[0-9]{1,3}+"
    rf"| ?[^\t\n\x0b\x0c\r A-Za-z0-9]++[\r\n]*+|{_S}++\Z|{_S}*[\r\n]|{_S}+(?!{_NOT_S})|{_S}"
)
# Text that exercises every branch of the split: contractions in both cases, digits in
# threes, punctuation runs with newlines, whitespace runs before words, lines and the end.
PROBE = (
    "I'm here, it's OK -- we'LL see; they've 12345 apples!!\n\n  indented\tTab \x0b\x0c"
    "  'quoted' (a+b)=c \r\n end...   \n\x1c\x1f mixed99words 3.14159 @@@\n   "
)
# The probe's words with no whitespace but single spaces, which take the split-free path.
PROBE_LINE = "I'm here, it's OK -- we'LL see; they've 12345 apples!! (a+b)=c 'quoted' 3.14159 @@@ x"
# Distinct pieces kept, each at most ``MAX_PIECE_CHARS`` long (a longer one, such as a run
# of base64, is counted each time it comes); the table is emptied when it passes
# ``MAX_PIECES``, so it stays under about 10 MB.
MAX_PIECES = 100_000
# The whitespace of cl100k's ``\s`` in ASCII other than the space.
_NOT_SPACE_WHITESPACE = ("\n", "\t", "\r", "\x0b", "\x0c")
MAX_PIECE_CHARS = 32


class PieceCounter:
    """Counts ASCII texts piece by piece; ``count`` returns None for any other text."""

    def __init__(self, encode_piece: Callable[[bytes], Any]) -> None:
        self._encode_piece = encode_piece
        self._pieces: dict[str, int] = {}
        # Per word of a text cut at single spaces: its count as the text's first word, and
        # as a later one (with the space before it).
        self._first: dict[str, int] = {}
        self._spaced: dict[str, int] = {}

    @classmethod
    def for_encoding(cls, enc: Any) -> PieceCounter | None:
        """A counter for tiktoken encoding ``enc``, or None when its split is not cl100k's
        or the counter disagrees with ``enc`` on the probe."""
        encode_piece = getattr(enc, "_encode_single_piece", None)
        if getattr(enc, "_pat_str", None) != CL100K_PATTERN or encode_piece is None:
            return None
        counter = cls(encode_piece)
        for text in (PROBE, PROBE.strip(), PROBE + "x", "", PROBE_LINE, PROBE_LINE):
            if counter.count(text) != len(enc.encode_ordinary(text)):
                return None
        counter._pieces.clear()
        counter._first.clear()
        counter._spaced.clear()
        return counter

    def count(self, text: str) -> int | None:
        """The exact token count of ``text``, or None when it is not ASCII."""
        if not text.isascii():
            return None
        if "\n" in text or "\t" in text or "\r" in text or "\x0b" in text or "\x0c" in text:
            return self._count_pieces(text)
        words = text.split(" ")
        spaced = self._spaced
        rest = iter(words)  # (the first word, then the rest: no copy of the list)
        try:
            return self._first[next(rest)] + sum(map(spaced.__getitem__, rest))
        except KeyError:
            pass
        if "" in words:  # a space at either end or two together: not words between spaces
            return self._count_pieces(text)
        if len(spaced) > MAX_PIECES:
            self._first.clear()
            spaced.clear()
        total = self._word(self._first, words[0], words[0])
        for word in words[1:]:
            n = spaced.get(word)
            total += self._word(spaced, word, " " + word) if n is None else n
        return total

    def count_many(self, texts: Sequence[str]) -> list[int | None]:
        """``count`` of each text (None for one not ASCII), with the checks every text needs
        made once on the texts joined: all ASCII and no whitespace but spaces sends each
        straight to its words' tables (a text with a word not in them, or with spaces at
        its ends or two together, goes through ``count``)."""
        joined = "".join(texts)
        if not joined.isascii() or any(map(joined.__contains__, _NOT_SPACE_WHITESPACE)):
            return [self.count(text) for text in texts]
        counts: list[int | None] = list(word_sums(list(texts), self._first, self._spaced))
        if -1 in counts:  # a text with a word in neither table
            for i, n in enumerate(counts):
                if n == -1:
                    counts[i] = self.count(texts[i])
        return counts

    def _word(self, table: dict[str, int], word: str, text: str) -> int:
        """The count of ``text`` (``word``, or it after a space), kept in ``table``."""
        n = self._count_pieces(text)
        if len(word) <= MAX_PIECE_CHARS:
            table[word] = n
        return n

    def _count_pieces(self, text: str) -> int:
        """``text`` split by the pattern and counted piece by piece."""
        pieces = _ASCII_SPLIT.findall(text)
        known = self._pieces
        try:
            return sum(map(known.__getitem__, pieces))
        except KeyError:
            pass
        if len(known) > MAX_PIECES:
            known.clear()
        total = 0
        for piece in pieces:  # (another thread may empty the table meanwhile: no re-reads)
            n = known.get(piece)
            if n is None:
                n = len(self._encode_piece(piece.encode("ascii")))
                if len(piece) <= MAX_PIECE_CHARS:
                    known[piece] = n
            total += n
        return total
