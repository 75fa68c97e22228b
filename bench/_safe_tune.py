"""Choosing the bounds that keep the shipped search at or above plain BM25 (issue 34).

``python bench/retrieval.py --tune-safe`` measures every setting of ``GRID`` (the
``SearchTuning`` fields ``ranker_share``, ``bm25_margin`` and ``long_turn_words``) over the
shipped search on the dev sets alone: LoCoMo's dev split and the dev part of the generated
assistant conversations (``bench/_assistant_sessions.py``). Each setting's figure on a set is
its recall@1, @5 and @10 minus that set's plain BM25 (measured in the same run); the
objective is the worst of those six differences, not their mean, so a setting that gains
much on one shape and loses on the other is not chosen. Ties go to the higher LoCoMo dev
recall@10, then to the mean difference. No held-out figure (LoCoMo test, the assistant
conversations' held-out part, the transcripts) is read here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from scroll_core import SearchTuning

__all__ = ["GRID", "KNOBS", "choose"]

KNOBS = ("ranker_share", "bm25_margin", "long_turn_words")
BOUNDS: tuple[tuple[float, int], ...] = ((1.0, -1), (1.0, 0), (1.0, 1), (1.0, 2), (1.0, 3),
                                         (0.5, -1))  # fmt: skip
# The word threshold: 0 (every search bounded), then the gap between the shapes' medians.
THRESHOLDS = (0, 30, 40, 60)
GRID: tuple[tuple[float, int, int], ...] = tuple(
    (share, margin, words)
    for words in THRESHOLDS
    for share, margin in BOUNDS
    if (share, margin) != (1.0, -1) or words == 0
)
RECALLS = ("recall_at_1", "recall_at_5", "recall_at_10")

# A set's measure: the tuning -> its recall@1/5/10 (and more) on that set's dev items.
Measure = Callable[[SearchTuning], dict[str, float]]


def choose(
    plain: dict[str, dict[str, float]],
    measures: dict[str, Measure],
    base: SearchTuning | None = None,
    grid: Sequence[tuple[float, int, int]] = GRID,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Every setting's differences from plain per dev set, and the one whose worst
    difference is highest. ``plain`` and ``measures`` are keyed by set name; the first set
    is the one whose recall@10 breaks ties (LoCoMo's)."""
    base = base or SearchTuning()
    first = next(iter(measures))
    trials = []
    for share, margin, words in grid:
        tuning = replace(base, ranker_share=share, bm25_margin=margin, long_turn_words=words)
        figures = {name: measure(tuning) for name, measure in measures.items()}
        gaps = {
            f"{name}.{m}": round(figures[name][m] - plain[name][m], 4)
            for name in measures
            for m in RECALLS
        }
        trial = {
            "setting": dict(zip(KNOBS, (share, margin, words), strict=True)),
            "worst": min(gaps.values()),
            "mean": round(sum(gaps.values()) / len(gaps), 4),
            f"{first}_recall_at_10": figures[first]["recall_at_10"],
            "gaps": gaps,
        }
        trials.append(trial)
        if progress is not None:
            progress(f"{trial['setting']} worst {trial['worst']:+.4f} gaps {gaps}")
    best = max(trials, key=lambda t: (t["worst"], t[f"{first}_recall_at_10"], t["mean"]))
    return {"chosen": best, "trials": trials, "objective": __doc__.split("\n\n")[1]}
