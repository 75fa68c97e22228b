"""Choosing ``SearchTuning``'s constants on LoCoMo's dev split, and only there.

``tune_on_dev`` hands ``measure`` the dev split's items alone (the test split is never
read while choosing), in two coordinate steps, because the candidate pool only bounds
which turns can score while the weights decide their order:

1. every combination of name weight and neighbour weights (±1, ±2) at the current pool;
2. the pool size with those weights.

The objective is mean evidence recall@5 (the headline figure), ties broken by recall@10,
then hit@10, then by keeping today's value (a change must pay for itself).

Not tuned, and why: the content weight is the unit (bm25 with neighbours is linear in the
column weights, so scaling all of them changes no ranking); the headline weight has no
data here (LoCoMo turns carry no headline) and stays as set; the stop-word list is shared
with the plain baseline, so it moves both sides and is not a Scroll knob to win on.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from bench._locomo_split import split_of
from scroll_core import SearchTuning

__all__ = ["GRID", "Choice", "Measure", "tune_on_dev"]

# What a measurement returns for one tuning: at least recall_at_5, recall_at_10, hit_at_10.
Measure = Callable[[SearchTuning, Sequence[Any]], dict[str, float]]

# Runs with neighbour_2 up to 0.3, then 0.5, each chose the grid's edge, so it reaches 0.8.
GRID: dict[str, tuple[float, ...]] = {
    "name_weight": (0.0, 0.5, 1.0, 2.0),
    "neighbour_1": (0.0, 0.2, 0.3, 0.4, 0.5, 0.6),
    "neighbour_2": (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8),
    "candidates": (10, 20, 30, 50, 100),
}


@dataclass(frozen=True)
class Choice:
    tuning: SearchTuning
    objective: dict[str, float]
    trials: list[dict[str, Any]]
    dev_items: int


def _key(scores: dict[str, float], is_current: bool) -> tuple[float, float, float, bool]:
    return (scores["recall_at_5"], scores["recall_at_10"], scores["hit_at_10"], is_current)


def _describe(tuning: SearchTuning) -> dict[str, Any]:
    return {
        "rank_weights": list(tuning.rank_weights),
        "neighbour_weights": list(tuning.neighbour_weights),
        "candidates": tuning.candidates,
    }


def _best(
    options: list[SearchTuning],
    current: SearchTuning,
    items: Sequence[Any],
    measure: Measure,
    trials: list[dict[str, Any]],
) -> tuple[SearchTuning, dict[str, float]]:
    best: tuple[tuple[float, float, float, bool], SearchTuning, dict[str, float]] | None = None
    for option in options:
        scores = measure(option, items)
        trial = {**_describe(option), **scores}
        if trial not in trials:
            trials.append(trial)
        key = _key(scores, option == current)
        if best is None or key > best[0]:
            best = (key, option, scores)
    assert best is not None
    return best[1], best[2]


def _trimmed(neighbours: tuple[float, float]) -> tuple[float, ...]:
    # Trailing zero weights only widen the pool read for nothing.
    weights = list(neighbours)
    while weights and weights[-1] == 0.0:
        weights.pop()
    return tuple(weights)


def tune_on_dev(
    items: Sequence[Any],
    measure: Measure,
    *,
    start: SearchTuning | None = None,
    grid: dict[str, tuple[float, ...]] = GRID,
    conversation_of: Callable[[Any], str] = lambda item: item.conversation,
) -> Choice:
    """The tuning with the best dev recall@5; ``measure`` is only ever given dev items."""
    dev = [item for item in items if split_of(conversation_of(item)) == "dev"]
    if not dev:
        raise ValueError("no dev-split items to tune on")
    current = start or SearchTuning()
    content, headline, _ = current.rank_weights
    trials: list[dict[str, Any]] = []
    seen: dict[SearchTuning, dict[str, float]] = {}

    def once(tuning: SearchTuning, chosen_items: Sequence[Any]) -> dict[str, float]:
        if tuning not in seen:
            seen[tuning] = measure(tuning, chosen_items)
        return seen[tuning]

    weighted = [
        replace(
            current,
            rank_weights=(content, headline, float(name)),
            neighbour_weights=_trimmed((float(n1), float(n2))),
        )
        for name, n1, n2 in itertools.product(
            grid["name_weight"], grid["neighbour_1"], grid["neighbour_2"]
        )
    ]
    if current not in weighted:
        weighted.append(current)
    chosen, _ = _best(weighted, current, dev, once, trials)
    pools = [replace(chosen, candidates=int(c)) for c in grid["candidates"]]
    if chosen not in pools:
        pools.append(chosen)
    chosen, scores = _best(pools, chosen, dev, once, trials)
    return Choice(tuning=chosen, objective=scores, trials=trials, dev_items=len(dev))


# The techniques issue 15 asked to try, each a switch in ``SearchTuning`` that is off by
# default; a small grid per technique, each measured on dev alone over the shipped search.
# The exact-match weight is not gridded: one weight, 1.0, as for coverage and proximity.
TECHNIQUE_GRID: dict[str, list[dict[str, Any]]] = {
    "speaker": [{"speaker_weight": w} for w in (0.5, 1.0, 2.0, 4.0)],
    "feedback": [
        {"feedback_docs": d, "feedback_terms": t, "feedback_weight": w}
        for d in (3, 5, 10)
        for t in (5, 10, 20)
        for w in (0.1, 0.2, 0.3)
    ],
    "diversity": [{"diversity_weight": w} for w in (0.1, 0.2, 0.5, 1.0)],
    "exact": [{"exact_weight": 1.0}],
    "window": [{"ranker_weights": (), "window_weight": w} for w in (0.5, 1.0, 2.0, 4.0)],
}


def tune_techniques(
    items: Sequence[Any],
    measure: Measure,
    *,
    start: SearchTuning | None = None,
    grid: dict[str, list[dict[str, Any]]] = TECHNIQUE_GRID,
    conversation_of: Callable[[Any], str] = lambda item: item.conversation,
) -> dict[str, dict[str, Any]]:
    """Per technique: its best setting on the dev split (same objective as ``tune_on_dev``),
    that setting's dev scores, the shipped search's, and whether it gains."""
    dev = [item for item in items if split_of(conversation_of(item)) == "dev"]
    if not dev:
        raise ValueError("no dev-split items to tune on")
    current = start or SearchTuning()
    shipped = measure(current, dev)
    out: dict[str, dict[str, Any]] = {}
    for name, options in grid.items():
        best: tuple[tuple[float, float, float, bool], dict[str, Any], dict[str, float]] | None
        best = None
        for option in options:
            scores = measure(replace(current, **option), dev)
            key = _key(scores, False)
            if best is None or key > best[0]:
                best = (key, option, scores)
        assert best is not None
        out[name] = {
            "chosen": best[1],
            "dev": best[2],
            "shipped_dev": shipped,
            "gains_on_dev": _key(best[2], False) > _key(shipped, False),
            "tried": len(options),
        }
    return out
