"""The sum of a text's words' token counts, written for mypyc (``native.COMPILED``).

``token_pieces.PieceCounter.count_many`` cuts a batch of texts at single spaces and sums
each text's words from its word tables; this is that loop. Compiled (``docs/native.md``),
the split and the table lookups are direct calls and the sums machine integers; this
source is the reference and the fallback, with the same answers either way
(``tests/test_native.py``). It is a module of its own so that ``token_pieces``, whose other
work is its regular expression and tiktoken's merges (C already), stays interpreted.
"""

from __future__ import annotations

__all__ = ["word_sums"]


def word_sums(texts: list[str], first: dict[str, int], spaced: dict[str, int]) -> list[int]:
    """Per text, its words' counts summed (``token_pieces.PieceCounter``'s tables): the
    first word's from ``first``, each later one's from ``spaced``, the words being the
    text cut at single spaces; -1 for a text with a word in neither table (its caller
    counts that text another way)."""
    counts: list[int] = []
    for text in texts:
        words = text.split(" ")
        total = first.get(words[0], -1)
        if total >= 0:
            for i in range(1, len(words)):
                n = spaced.get(words[i], -1)
                if n < 0:
                    total = -1
                    break
                total += n
        counts.append(total)
    return counts
