"""Bounds that keep a re-ranked search close to plain BM25 (issue 34).

The learned ranker was fitted on LoCoMo's short two-person chat; on long assistant
conversations it lost to plain BM25 at the top rank. ``SearchTuning`` bounds it three ways,
each applied by ``run_search`` after the ranker has scored the turns it read:

- ``mixed``: each turn's ranker score (over the best) interpolated with its own plain bm25
  (over the best);
- ``bounded``: BM25's order as a floor, so a candidate BM25 ranks r-th is never shown below
  place r + margin;
- ``applies``: the shape switch, bounding only a search whose BM25 candidates are long turns
  (``candidate_words``, their median length in words).
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any

__all__ = ["applies", "best", "bounded", "candidate_words", "mixed", "word_counts"]

# The whitespace ``str.split`` splits ASCII text on, less the space.
_OTHER_SPACE = ("\t", "\n", "\x0b", "\x0c", "\r", "\x1c", "\x1d", "\x1e", "\x1f")


def applies(
    rows: dict[int, tuple[Any, ...]],
    base: dict[int, float],
    share: float,
    margin: int,
    long_words: int,
) -> bool:
    """Whether a share below 1 or a margin of 0 or more bounds this search: always when
    ``long_words`` is 0, else when the BM25 candidates' median length in words is at least
    ``long_words``."""
    if share >= 1.0 and margin < 0:
        return False
    if long_words <= 0:
        return True
    return candidate_words(rows, base) >= long_words


def candidate_words(rows: dict[int, tuple[Any, ...]], base: dict[int, float]) -> float:
    """The median length in words of the BM25 candidates' text (the session shape the
    shape switch reads)."""
    lengths = sorted(word_counts([rows[seq][3] or "" for seq in base if seq in rows]))
    if not lengths:
        return 0.0
    middle = len(lengths) // 2
    return float(
        lengths[middle] if len(lengths) % 2 else (lengths[middle - 1] + lengths[middle]) / 2
    )


def word_counts(texts: list[str]) -> list[int]:
    """``len(text.split())`` of each of ``texts``. When every text is ASCII whose only
    whitespace is single spaces between words (checked once over all of them joined), a
    text's words are its spaces plus one, counted without making a string per word;
    otherwise each text is split."""
    joined = "\x00".join(texts)
    single = (
        joined.isascii()
        and "  " not in joined
        and not joined.startswith(" ")
        and not joined.endswith(" ")
        and "\x00 " not in joined
        and " \x00" not in joined
    )
    if single:
        for space in _OTHER_SPACE:
            if space in joined:
                single = False
                break
    if not single:
        return [len(text.split()) for text in texts]
    return [text.count(" ") + 1 if text else 0 for text in texts]


def mixed(scores: dict[int, float], base: dict[int, float], share: float) -> dict[int, float]:
    """Each turn's score interpolated with its own plain bm25, both over their best (a turn
    read only as a neighbour has bm25 0)."""
    top = max(scores.values(), default=0.0) or 1.0
    best = max(base.values(), default=0.0) or 1.0
    out = {}
    for seq in scores.keys() | base.keys():
        value = share * scores.get(seq, 0.0) / top + (1.0 - share) * base.get(seq, 0.0) / best
        if value > 0:
            out[seq] = value
    return out


def best(scores: dict[int, float], k: int) -> list[tuple[int, float]]:
    """The first ``k`` of ``scores`` best first, ties to the lower seq:
    ``sorted(sorted(scores.items()), key=score, reverse=True)[:k]`` (a sort is stable, also
    reversed). Sorting all of them is the cheaper way for the ~150 turns a search ranks: two
    sorts in C with ``itemgetter`` took 26 us at k = 10, ``heapq.nsmallest`` keyed by
    (-score, seq) 70 us (its key called per turn; 150 random scores, ``timeit``)."""
    if k <= 0:
        return []
    return sorted(sorted(scores.items()), key=_SCORE, reverse=True)[:k]


_SCORE = itemgetter(1)


def bounded(
    ranked: list[tuple[int, float]], base: dict[int, float], k: int, margin: int
) -> list[tuple[int, float]]:
    """The first ``k`` of ``ranked`` with BM25's order as a floor: place ``p`` takes the best
    BM25 candidate not yet shown when BM25 ranks it at ``p - margin`` or higher, else the
    next of ``ranked``. Scores are kept non-increasing."""
    order = sorted(base, key=lambda seq: (-base[seq], seq))
    own = dict(ranked)
    shown: set[int] = set()
    out: list[tuple[int, float]] = []
    floor, pick = 0, 0
    while len(out) < k:
        while floor < len(order) and order[floor] in shown:
            floor += 1
        while pick < len(ranked) and ranked[pick][0] in shown:
            pick += 1
        if floor < len(order) and (floor + margin <= len(out) or pick >= len(ranked)):
            seq = order[floor]
        elif pick < len(ranked):
            seq = ranked[pick][0]
        else:
            break
        shown.add(seq)
        score = own.get(seq, 0.0)
        out.append((seq, min(score, out[-1][1]) if out else score))
    return out
