"""The learned linear ranker's scores for the turns a search read, computed column by column.

``search._linear_scores`` is the reference: ``_rank_features`` builds every turn's feature
tuple, then a weighted sum per turn. On a small log that Python, not the full-text index,
was most of a search's time (about 1 ms of a 2 ms search at 20k events). This computes the
very same sums with less: one pass over the turns for the masks of the query's terms they
hold and their neighbours', each feature the weights use as one list, and the weighted sum
as one list operation per weight, in the reference's order, so every score is the same
float to the last bit and the ranking cannot move (``tests/test_search_linear_rank.py``
compares both on seeded logs).

It also skips work the reference repeats: which terms a candidate holds is read from its
mask (for ASCII text, where the mask and the token scan agree by construction), so a
candidate's tokens are only scanned for proximity, when it holds two terms or more.

With the shipped reach (two turns either side) the neighbour features and the weighted sum
are one pass over the turns (``_two_either_side``) instead of a list per feature: about an
eighth less time in this module, 3-5% of a search at 20k events (``bench/search_ab.py``);
other reaches take the lists.

It covers the shipped configuration (the features up to ``rare_window_coverage``, coverage,
proximity and speaker rescoring); ``supports`` says when, and ``run_search`` takes the
reference otherwise. (``tuning`` is a ``search.SearchTuning``, typed ``Any`` here: this
module is imported by ``search``.)
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

from . import fts_query
from .term_match import TermMatcher, mask_terms

__all__ = ["linear_scores", "supports"]

# The features this module computes, in ``search.RANK_FEATURES`` order: own, near_1, near_2,
# coverage, window_coverage, speaker, rare_coverage, rare_window_coverage.
_COMPUTED = 8
# Up to this many query terms the term shares of every mask are listed up front (64 masks).
_LISTED_TERMS = 6


def supports(tuning: Any, weights: Sequence[float]) -> bool:
    """Whether ``linear_scores`` gives the reference's scores for ``tuning``: no exact
    pieces, no feedback, and no weight on the features past ``rare_window_coverage``."""
    feedback = tuning.feedback_terms and tuning.feedback_docs and tuning.feedback_weight
    return not tuning.exact_weight and not feedback and not any(weights[_COMPUTED:])


def linear_scores(
    rows: dict[int, tuple[Any, ...]],
    base: dict[int, float],
    terms: list[str],
    tuning: Any,
    rarity: list[float] | None,
    weights: Sequence[float],
    matcher: TermMatcher,
) -> dict[int, float]:
    """``{seq: score}`` for each turn read whose weighted sum is above 0 (``rows``: the
    turns read, ``base``: the candidates' bm25), the same floats as the reference."""
    # The columns read, once, as typed lists (compiled, each is then read without a
    # tuple index or a type check per use).
    seqs: list[int] = []
    sessions: list[str] = []
    names: list[str | None] = []
    contents: list[str] = []
    headed: list[int] = []
    heads: list[str] = []
    for seq, row in rows.items():
        if row[4]:
            headed.append(len(seqs))
            heads.append(row[4])
        seqs.append(seq)
        sessions.append(row[1])
        names.append(row[2])
        contents.append(row[3] or "")
    # A turn's text is its content and headline with a space between, so the terms it holds
    # are those of the one and of the other: the few headlines are matched on their own.
    masks = matcher.held_all(contents)
    if headed:
        for j, mask in zip(headed, matcher.held_all(heads), strict=True):
            masks[j] |= mask
    n = len(terms)
    count = len(seqs)
    if rarity is None:
        holding = [0] * n
        for mask in masks:
            which = 0
            while mask:
                if mask & 1:
                    holding[which] += 1
                mask >>= 1
                which += 1
        rarity = [math.log((count + 1) / (h + 0.5)) for h in holding]
    index: dict[int, int] = {}
    for j in range(count):
        index[seqs[j]] = j
    wanted = set(terms)
    # Whether the query names each speaker (or tool), once per name.
    named: dict[str | None, float] = {}
    for name in names:
        if name not in named:
            named[name] = 1.0 if name and wanted.intersection(fts_query.tokens(name)) else 0.0

    scored = _rescored(contents, rows, names, base, index, masks, n, tuning, matcher, named)
    top = max(scored.values(), default=0.0) or 1.0

    if len(tuning.neighbour_weights) == 2:
        return _two_either_side(
            seqs, sessions, names, masks, scored, top, rarity, weights, named, n
        )
    values = list(rows.values())

    # What reads the neighbours, list by list: the ``near`` sums (two turns at most) and the
    # window's mask (the whole reach), same session only, before then after, nearest first.
    # A turn is looked up by its session's number times 2**64 plus its seq, so a key off by
    # ``d`` is the turn ``d`` away in the same session (seqs are below 2**63). Index
    # ``count`` stands for no such turn: no terms, adding 0.0 (which changes no sum: none is
    # ever -0.0).
    reach = len(tuning.neighbour_weights)
    numbers: dict[str, int] = {}
    keys = [
        (numbers.setdefault(row[1], len(numbers)) << 64) + seq
        for seq, row in zip(seqs, values, strict=True)
    ]
    get = dict(zip(keys, range(count), strict=True)).get
    found = [scored.get(seq) for seq in seqs]
    own = [0.0 if score is None else score / top for score in found]
    shares = [*own, 0.0]
    held = [*masks, 0]
    near_1: list[float] = []
    near_2: list[float] = []
    windows = masks
    for distance in range(1, reach + 1):
        before = [get(key - distance, count) for key in keys]
        after = [get(key + distance, count) for key in keys]
        windows = [
            window | held[b] | held[a] for window, b, a in zip(windows, before, after, strict=True)
        ]
        if distance <= 2:
            near = [0.0 + shares[b] + shares[a] for b, a in zip(before, after, strict=True)]
            if distance == 1:
                near_1 = near
            else:
                near_2 = near

    rare_total = sum(rarity) or 1.0
    rare = {
        mask: sum(rarity[i] for i in mask_terms(mask)) / rare_total for mask in {*masks, *windows}
    }
    zeros = [0.0] * count
    weights = (*weights[:_COMPUTED], *(0.0,) * (_COMPUTED - len(weights)))
    columns: list[list[float]] = [
        own,
        near_1 or zeros,
        near_2 or zeros,
        [m.bit_count() / n for m in masks] if weights[3] else zeros,
        [m.bit_count() / n for m in windows] if weights[4] else zeros,
        [named[name] for name in names] if weights[5] else zeros,
        [rare[m] for m in masks] if weights[6] else zeros,
        [rare[m] for m in windows] if weights[7] else zeros,
    ]
    # The reference adds ``w * x`` feature by feature from 0.0, leaving out the weights at 0;
    # here a weight at 0 adds 0.0 * 0.0, which changes no sum (none is ever -0.0).
    w0, w1, w2, w3, w4, w5, w6, w7 = weights
    totals = [
        0.0 + w0 * a + w1 * b + w2 * c + w3 * d + w4 * e + w5 * f + w6 * g + w7 * h
        for a, b, c, d, e, f, g, h in zip(*columns, strict=True)
    ]
    return {seq: total for seq, total in zip(seqs, totals, strict=True) if total > 0}


def _rescored(
    contents: list[str],
    rows: dict[int, tuple[Any, ...]],
    names: list[str | None],
    base: dict[int, float],
    index: dict[int, int],
    masks: list[int],
    n: int,
    tuning: Any,
    matcher: TermMatcher,
    named: dict[str | None, float],
) -> dict[int, float]:
    """The candidates' bm25 after coverage, proximity and the speaker match, as
    ``search._rescored`` gives them."""
    coverage: float = tuning.coverage_weight
    proximity: float = tuning.proximity_weight
    features = n > 1 and bool(coverage or proximity)
    speaker: float = tuning.speaker_weight
    if not features and not speaker:
        return base
    spread = max(1, n - 1)
    out = dict(base)
    for seq, score in base.items():
        j = index.get(seq, -1)
        if j < 0:
            continue
        if features:
            factor = 1.0
            headline = rows[seq][4]
            text = contents[j] + " " + (headline or "")
            if matcher.plain(text):
                held = masks[j].bit_count()
                closest = matcher.closest(text) if held > 1 and proximity else 0
            else:
                positions = matcher.positions(text)
                held = len({which for _, which in positions})
                closest = _closest(positions) if held > 1 and proximity else 0
            if held:
                factor += coverage * (held - 1) / spread
            if closest:
                factor += proximity / closest
            score = score * factor
        if speaker and named[names[j]]:
            score = score * (1.0 + speaker)
        out[seq] = score
    return out


def _closest(positions: list[tuple[int, int]]) -> int:
    return min(b[0] - a[0] for a, b in itertools.pairwise(positions) if a[1] != b[1])


def _two_either_side(
    seqs: list[int],
    sessions: list[str],
    names: list[str | None],
    masks: list[int],
    scored: dict[int, float],
    top: float,
    rarity: list[float],
    weights: Sequence[float],
    named: dict[str | None, float],
    n: int,
) -> dict[int, float]:
    """``linear_scores``' last steps for the shipped reach of two turns either side, in one
    pass over the turns instead of a list per feature: the same neighbours, masks and sums
    in the same order, so the same floats (``0.0 + x + y`` of a ``near`` sum is ``x + y``:
    no share is ever -0.0). The turn ``d`` before a turn is the one read at seq ``- d``
    when it is in the same session (seqs are unique over the log); index ``count`` stands
    for no such turn (no terms, share 0.0)."""
    count = len(seqs)
    shares = [0.0] * (count + 1)
    for j in range(count):
        score = scored.get(seqs[j])
        if score is not None:
            shares[j] = score / top
    held = [*masks, 0]
    rare_total = 0.0
    for value in rarity:
        rare_total += value
    rare_total = rare_total or 1.0
    # Per mask: the share of the query's terms it holds, and the rarity-weighted share,
    # listed for every mask of a short query (indexed by the mask), else kept per distinct
    # mask met.
    listed = n <= _LISTED_TERMS
    own_list: list[float] = []
    rare_list: list[float] = []
    if listed:
        for every in range(1 << n):
            own_list.append(every.bit_count() / n)
            rare_list.append(_rare(every, rarity, rare_total))
    own_of: dict[int, float] = {}
    rare_of: dict[int, float] = {}
    padded = (*weights[:_COMPUTED], *(0.0,) * (_COMPUTED - len(weights)))
    w0: float = padded[0]
    w1: float = padded[1]
    w2: float = padded[2]
    w3: float = padded[3]
    w4: float = padded[4]
    w5: float = padded[5]
    w6: float = padded[6]
    w7: float = padded[7]
    # The turns in seq order (the order the pool is read in, checked): the turn ``d`` away
    # in seq, when read, is then at most ``d`` places away in that order.
    order = list(range(count))
    for j in range(1, count):
        if seqs[j - 1] > seqs[j]:
            order.sort(key=seqs.__getitem__)
            break
    out: dict[int, float] = {}
    for place in range(count):
        j = order[place]
        seq = seqs[j]
        session = sessions[j]
        b1 = a1 = b2 = a2 = count
        for other in range(max(0, place - 2), min(count, place + 3)):
            k = order[other]
            gap = seqs[k] - seq
            if gap == 0 or gap < -2 or gap > 2 or sessions[k] != session:
                continue
            if gap == -1:
                b1 = k
            elif gap == 1:
                a1 = k
            elif gap == -2:
                b2 = k
            else:
                a2 = k
        mask = masks[j]
        window = mask | held[b1] | held[a1] | held[b2] | held[a2]
        if listed:
            own, own_rare = own_list[mask], rare_list[mask]
            whole, whole_rare = own_list[window], rare_list[window]
        else:
            if mask not in own_of:
                own_of[mask] = mask.bit_count() / n
                rare_of[mask] = _rare(mask, rarity, rare_total)
            if window not in own_of:
                own_of[window] = window.bit_count() / n
                rare_of[window] = _rare(window, rarity, rare_total)
            own, own_rare = own_of[mask], rare_of[mask]
            whole, whole_rare = own_of[window], rare_of[window]
        total = (
            0.0 + w0 * shares[j] + w1 * (shares[b1] + shares[a1]) + w2 * (shares[b2] + shares[a2])
            + w3 * own + w4 * whole + w5 * named[names[j]] + w6 * own_rare + w7 * whole_rare
        )  # fmt: skip
        if total > 0:
            out[seq] = total
    return out


def _rare(mask: int, rarity: list[float], total: float) -> float:
    """The rarity-weighted share of the terms in ``mask``: their rarities added in
    ascending term order from 0.0 (as ``sum`` adds them), over ``total``."""
    value = 0.0
    which = 0
    while mask:
        if mask & 1:
            value += rarity[which]
        mask >>= 1
        which += 1
    return value / total
