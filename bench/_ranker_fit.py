"""Fitting ``SearchTuning.ranker_weights`` on LoCoMo's dev split, and only there.

Standard learning to rank with a handful of weights: every dev question is searched once
and every turn the search reads gets its ``RANK_FEATURES`` (``scroll_core.store.search``); a
turn's score is the dot product of the weights with them, and coordinate ascent moves one
weight at a time over a fixed ladder of values, keeping a move only when it raises the
objective (mean of evidence recall@5 and recall@10 on dev; ties keep the current weight),
until a whole pass moves nothing. It starts from the hand formula the search ships
(own 1, neighbours 0.4 and 0.5, the rest 0), so a fitted ranker is never worse than it on
dev, and its first weight stays 1 (scaling every weight changes no ranking).
Deterministic: the same log gives the same weights. The test split and the held-out
transcripts are never read here.

    python bench/retrieval.py --fit-ranker     # prints the weights to ship
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bench._locomo_split import split_of
from scroll_core.store.search import RANK_FEATURES, SearchFilters, SearchTuning, search_features
from scroll_core.store.sqlite_search import SQLITE

__all__ = [
    "LADDER",
    "Fit",
    "Question",
    "ceiling",
    "collect",
    "cross_validate",
    "fit_weights",
    "folds",
    "held_out_recalls",
    "objective",
    "recalls",
]

# The values each weight may take (the first, "own", is the unit and never moves).
LADDER: tuple[float, ...] = (
    -1.0, -0.5, -0.25, 0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0, 1.5, 2.0, 3.0, 5.0,
)  # fmt: skip
START: tuple[float, ...] = (1.0, 0.4, 0.5, *(0.0,) * (len(RANK_FEATURES) - 3))
MAX_PASSES = 6


@dataclass(frozen=True)
class Question:
    """One dev question as the ranker sees it: each turn read (seq, features) and which
    seqs are its evidence."""

    turns: tuple[tuple[int, tuple[float, ...]], ...]
    evidence: frozenset[int]
    evidence_count: int
    # The LoCoMo conversation it is about (the tree fit's cross-validation folds).
    conversation: str = ""
    # Its share in the fit's mean recall: 1 for a question as asked; less for a variant
    # standing for one of several ways it might be asked (``bench/wrong_dates.py``).
    weight: float = 1.0


@dataclass(frozen=True)
class Fit:
    weights: tuple[float, ...]
    dev: dict[str, float]
    start_dev: dict[str, float]
    passes: int


def collect(
    log: Any,
    items: Sequence[Any],
    seq_of: Callable[[Any], frozenset[int]],
    tuning: SearchTuning,
    session_of: Callable[[Any], str],
    split: str = "dev",
    trees: bool = False,
) -> list[Question]:
    """Dev items only, searched once each under ``tuning`` (its pool size and reach), with
    ``RANK_FEATURES`` (``TREE_FEATURES`` when ``trees``). ``split="test"`` is for ``ceiling``
    alone, a diagnostic: nothing is fitted on it."""
    db = log._reader()
    out = []
    for item in items:
        if split_of(item.conversation) != split:
            continue
        features = search_features(
            db,
            item.question,
            10,
            SearchFilters(session_id=session_of(item)),
            tuning,
            SQLITE,
            log.term_stats,
            trees=trees,
        )
        out.append(
            Question(
                turns=tuple(sorted(features.items())),
                evidence=seq_of(item),
                evidence_count=len(item.evidence),
                conversation=item.conversation,
            )
        )
    if not out:
        raise ValueError(f"no {split}-split items to fit on")
    return out


def recalls(questions: Sequence[Question], weights: Sequence[float]) -> dict[str, float]:
    """Dev evidence recall@5 and @10 of the linear ranker at ``weights``."""
    return _recalls(questions, weights)


def _recalls(questions: Sequence[Question], weights: Sequence[float]) -> dict[str, float]:
    r5 = r10 = 0.0
    for q in questions:
        if q.weight <= 0:
            raise ValueError(f"a question's weight must be positive, got {q.weight}")
        scored = []
        for seq, values in q.turns:
            total = sum(w * x for w, x in zip(weights, values, strict=True))
            if total > 0:
                scored.append((-total, seq))
        scored.sort()
        top = [seq for _, seq in scored[:10]]
        r5 += q.weight * len(q.evidence.intersection(top[:5])) / q.evidence_count
        r10 += q.weight * len(q.evidence.intersection(top)) / q.evidence_count
    n = sum(q.weight for q in questions)
    return {"recall_at_5": r5 / n, "recall_at_10": r10 / n}


class _Scorer:
    """``_recalls`` over a fixed set of questions, as array arithmetic: every turn of every
    question one row of a matrix, so trying a weight costs one product, not a Python loop
    over 100,000 turns (a fit tries a few hundred weights; the folds of a cross-validation
    five times that). Same ranking: score, then the lower seq first.

    Only an evidence turn's place matters, so instead of sorting every question's turns the
    scorer counts, for each evidence turn, the turns of its question that rank before it:
    the pairs (evidence turn, turn of the same question) and which of each pair wins a tie
    are fixed, so a trial is one comparison per pair and a count (about 4x faster than a
    sort of every row: 129 -> 31 ms a trial over 150,000 turns)."""

    def __init__(self, questions: Sequence[Question]) -> None:
        import numpy as np  # the ``fit`` extra (``make install``)

        self.np = np
        rows = [(i, seq, values) for i, q in enumerate(questions) for seq, values in q.turns]
        self.width = len(rows[0][2]) if rows else 0
        self.matrix = np.array([values for _, _, values in rows], dtype=float).reshape(
            len(rows), self.width
        )
        question = np.array([i for i, _, _ in rows], dtype=np.int64)
        seq = np.array([seq for _, seq, _ in rows], dtype=np.int64)
        evidence = np.array([s in questions[i].evidence for i, s, _ in rows], dtype=bool)
        self.counts = np.array([q.evidence_count for q in questions], dtype=float)
        self.weights = np.array([q.weight for q in questions], dtype=float)
        if (self.weights <= 0).any():
            raise ValueError("a question's weight must be positive")
        self.weights /= self.weights.sum() or 1.0
        # Each question's turns are consecutive rows (built question by question).
        first = np.searchsorted(question, np.arange(len(questions)), side="left")
        size = np.searchsorted(question, np.arange(len(questions)), side="right") - first
        self.ev_rows = np.flatnonzero(evidence)
        self.ev_question = question[self.ev_rows]
        per_ev = size[self.ev_question]
        self.pair_ev = np.repeat(np.arange(len(self.ev_rows)), per_ev)
        offset = np.arange(len(self.pair_ev)) - np.repeat(np.cumsum(per_ev) - per_ev, per_ev)
        self.pair_row = np.repeat(first[self.ev_question], per_ev) + offset
        # On an equal score the lower seq ranks first (and, for equal seqs, the earlier row).
        their_seq, own_seq = seq[self.pair_row], seq[self.ev_rows][self.pair_ev]
        own_row = self.ev_rows[self.pair_ev]
        self.tie_before = (their_seq < own_seq) | (
            (their_seq == own_seq) & (self.pair_row < own_row)
        )

    def __call__(self, weights: Sequence[float]) -> dict[str, float]:
        np = self.np
        if len(weights) != self.width:
            raise ValueError(f"{self.width} weights needed, got {len(weights)}")
        scores = self.matrix @ np.asarray(weights, dtype=float)
        own = scores[self.ev_rows]
        theirs, mine = scores[self.pair_row], own[self.pair_ev]
        before = (theirs > mine) | ((theirs == mine) & self.tie_before)
        place = np.bincount(self.pair_ev, weights=before, minlength=len(self.ev_rows))
        # Only turns that score above 0 are ranked at all.
        ranked = own > 0
        n = len(self.counts)
        out = {}
        for k in (5, 10):
            held = np.bincount(self.ev_question, weights=ranked & (place < k), minlength=n)
            out[f"recall_at_{k}"] = float((held / self.counts * self.weights).sum())
        return out


def folds(questions: Sequence[Question]) -> list[str]:
    """The conversations the questions come from: one fold each, held out in turn."""
    conversations = sorted({q.conversation for q in questions})
    if len(conversations) < 2:
        raise ValueError("cross-validation needs questions from two conversations or more")
    return conversations


def cross_validate(
    questions: Sequence[Question],
    start: Sequence[float] = START,
    fixed: Sequence[str] = (),
) -> dict[str, float]:
    """Leave-one-conversation-out recall of ``fit_weights(start, fixed)``: fitted on all
    conversations but one, scored on that one, averaged over questions (by their weight).
    The figure a fit's in-sample dev recall overstates."""
    return held_out_recalls(questions, lambda train: fit_weights(train, start, fixed).weights)


def held_out_recalls(
    questions: Sequence[Question], fit: Callable[[list[Question]], Sequence[float]]
) -> dict[str, float]:
    """Leave-one-conversation-out recall of any linear fit: ``fit`` gets the questions of
    every conversation but one and returns weights, scored on that one."""
    totals = {"recall_at_5": 0.0, "recall_at_10": 0.0}
    for held in folds(questions):
        train = [q for q in questions if q.conversation != held]
        test = [q for q in questions if q.conversation == held]
        got = _recalls(test, fit(train))
        for metric in totals:
            totals[metric] += got[metric] * sum(q.weight for q in test)
    return {metric: total / sum(q.weight for q in questions) for metric, total in totals.items()}


def ceiling(questions: Sequence[Question], k: int = 10) -> float:
    """Mean evidence recall@k of an oracle that re-ranks the turns read perfectly: what no
    re-ranking of this pool can pass."""
    total = 0.0
    for q in questions:
        read = q.evidence.intersection(seq for seq, _ in q.turns)
        total += min(len(read), k) / q.evidence_count
    return total / len(questions)


def objective(scores: dict[str, float]) -> float:
    return (scores["recall_at_5"] + scores["recall_at_10"]) / 2


def fit_weights(
    questions: Sequence[Question],
    start: Sequence[float] = START,
    fixed: Sequence[str] = (),
) -> Fit:
    """Coordinate ascent from ``start``; the features named in ``fixed`` keep their starting
    weight (0 in ``START``: the ranker without them)."""
    if len(start) != len(RANK_FEATURES):
        raise ValueError(f"{len(RANK_FEATURES)} starting weights needed, got {len(start)}")
    unknown = set(fixed) - set(RANK_FEATURES)
    if unknown:
        raise ValueError(f"no such ranker feature: {', '.join(sorted(unknown))}")
    free = [i for i in range(1, len(start)) if RANK_FEATURES[i] not in fixed]
    score = _Scorer(questions)
    weights = list(start)
    first = score(weights)
    best = objective(first)
    passes = 0
    while passes < MAX_PASSES:
        passes += 1
        moved = False
        for i in free:
            for value in LADDER:
                if value == weights[i]:
                    continue
                trial = [*weights[:i], value, *weights[i + 1 :]]
                got = objective(score(trial))
                if got > best + 1e-12:
                    best, weights, moved = got, trial, True
        if not moved:
            break
    return Fit(tuple(weights), _recalls(questions, weights), first, passes)
