"""Fitting the tree ranker (``SearchTuning.ranker_trees``) on LoCoMo's dev split, and only there.

LambdaMART (LightGBM's ``lambdarank`` objective, through its booster API) over ``TREE_FEATURES`` of
every turn the shipped search reads for each dev question, a turn labelled 1 when it is one
of the question's evidence turns. The trees are kept small (few leaves, many turns per leaf,
at most ``MAX_TREES``), and what is free among those is chosen by leave-one-conversation-out
cross-validation over the five dev conversations: each setting is fitted on four and scored
on the fifth, five times, and the setting (and the number of trees, read off the same fits)
with the best mean objective (mean of evidence recall@5 and @10, as the linear ranker's fit)
wins; ties go to the smaller model. The winner is then refitted on all five and written as
JSON (``scroll_core/store/rank_trees.py`` reads it, without LightGBM). The test split and the
held-out transcripts are never read here.

Monotone constraints are one of the settings tried: a turn never loses by holding more of
the query, more bm25 of its own or beside it, a speaker the query names, or a better place
in the BM25 order; length and the query's own size are left free.

Deterministic: one thread, fixed seed, no bagging; the same log gives the same model.

    # writes scroll_core/store/ranker_trees.json:
    python bench/retrieval.py --fit-ranker --fit trees
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench._ranker_fit import Question, fit_weights, folds, objective, recalls
from scroll_core.store.rank_trees import FORMAT
from scroll_core.store.search import RANK_FEATURES, TREE_FEATURES, TREE_RANK_FEATURES

__all__ = [
    "GRID",
    "MAX_TREES",
    "cross_validate",
    "fit_trees",
    "linear_cross_validate",
    "model_json",
    "rank_features_only",
    "tree_recalls",
]

MAX_TREES = 100
# Trees counted at these points of each fit (the cross-validation's choice of size).
TREE_COUNTS = (10, 25, 50, 100)
GRID: dict[str, tuple[Any, ...]] = {
    "num_leaves": (4, 8),
    "min_child_samples": (50, 200),
    "learning_rate": (0.05, 0.1),
    "monotone": (True, False),
}
# +1: a larger value never lowers the score; -1: never raises it; 0: free.
MONOTONE: dict[str, int] = {
    "own": 1, "near_1": 1, "near_2": 1, "coverage": 1, "window_coverage": 1, "speaker": 1,
    "rare_coverage": 1, "rare_window_coverage": 1, "day": 1, "bm25_rank": -1, "length": 0,
    "query_terms": 0, "terms_held": 1,
}  # fmt: skip


@dataclass(frozen=True)
class TreeFit:
    model: dict[str, Any]
    setting: dict[str, Any]
    cv: dict[str, Any]
    dev: dict[str, float]
    seconds: float


def _params(setting: dict[str, Any], trees: int) -> dict[str, Any]:
    params: dict[str, Any] = {
        "objective": "lambdarank",
        "num_iterations": trees,
        "num_leaves": setting["num_leaves"],
        "min_data_in_leaf": setting["min_child_samples"],
        "learning_rate": setting["learning_rate"],
        "num_threads": 1,
        "seed": 0,
        "deterministic": True,
        "force_col_wise": True,
        "verbose": -1,
    }
    if setting["monotone"]:
        params["monotone_constraints"] = [MONOTONE[f] for f in TREE_FEATURES]
    return params


def _matrix(questions: Sequence[Question]) -> tuple[list[list[float]], list[int], list[int]]:
    """Rows, labels and group sizes of the questions that have an evidence turn read (the
    others give LambdaMART nothing to order)."""
    rows: list[list[float]] = []
    labels: list[int] = []
    groups: list[int] = []
    for q in questions:
        if not q.evidence.intersection(seq for seq, _ in q.turns):
            continue
        for seq, values in q.turns:
            rows.append(list(values))
            labels.append(int(seq in q.evidence))
        groups.append(len(q.turns))
    return rows, labels, groups


def _fit(questions: Sequence[Question], setting: dict[str, Any], trees: int) -> Any:
    import lightgbm
    import numpy

    rows, labels, groups = _matrix(questions)
    data = lightgbm.Dataset(
        numpy.asarray(rows, dtype=numpy.float64),
        numpy.asarray(labels),
        group=groups,
        feature_name=list(TREE_FEATURES),
    )
    # The booster API (what ``LGBMRanker`` wraps) needs no scikit-learn.
    return lightgbm.train(_params(setting, trees), data)


def tree_recalls(
    questions: Sequence[Question], predict: Any, trees: int | None = None
) -> dict[str, float]:
    """Evidence recall@5 and @10 when each question's turns are ordered by the model's
    score (ties by seq, as the search orders them); ``predict(rows, trees)``."""
    r5 = r10 = 0.0
    for q in questions:
        if not q.turns:
            continue
        scores = predict([list(v) for _, v in q.turns], trees)
        order = sorted(zip(scores, (seq for seq, _ in q.turns), strict=True),
                       key=lambda p: (-p[0], p[1]))  # fmt: skip
        top = [seq for _, seq in order[:10]]
        r5 += len(q.evidence.intersection(top[:5])) / q.evidence_count
        r10 += len(q.evidence.intersection(top)) / q.evidence_count
    n = len(questions)
    return {"recall_at_5": r5 / n, "recall_at_10": r10 / n}


def _predictor(ranker: Any) -> Any:
    import numpy

    return lambda rows, trees: ranker.predict(
        numpy.asarray(rows, dtype=numpy.float64), num_iteration=trees
    )


def cross_validate(
    questions: Sequence[Question], grid: dict[str, tuple[Any, ...]] = GRID
) -> dict[str, Any]:
    """Leave-one-conversation-out objective of every ``grid`` setting (``GRID``'s names) at
    every ``TREE_COUNTS`` size, and the best (ties to fewer leaves, then fewer trees)."""
    if set(grid) != set(GRID) or not all(grid.values()):
        raise ValueError(f"a grid names a value or more for each of {sorted(GRID)}")
    held_out = folds(questions)
    results = []
    for values in itertools.product(*grid.values()):
        setting = dict(zip(grid, values, strict=True))
        per_size: dict[int, list[dict[str, float]]] = {n: [] for n in TREE_COUNTS}
        for held in held_out:
            train = [q for q in questions if q.conversation != held]
            test = [q for q in questions if q.conversation == held]
            ranker = _fit(train, setting, MAX_TREES)
            for n in TREE_COUNTS:
                per_size[n].append(tree_recalls(test, _predictor(ranker), n))
        for n, scores in per_size.items():
            mean = {m: sum(s[m] for s in scores) / len(scores) for m in scores[0]}
            results.append({**setting, "trees": n, "cv": mean, "objective": objective(mean)})
    best = max(
        results,
        key=lambda r: (round(r["objective"], 9), -r["num_leaves"], -r["trees"]),
    )
    return {"folds": held_out, "results": results, "best": best}


def linear_cross_validate(questions: Sequence[Question]) -> dict[str, float]:
    """The linear ranker under the same leave-one-conversation-out folds (coordinate ascent
    from the hand formula on four conversations, scored on the fifth, the day feature held
    at 0 as it ships, the features the trees do not read held at 0 too): the figure the
    trees' cross-validation is compared with."""
    width = len(TREE_RANK_FEATURES)
    pad = (0.0,) * (len(RANK_FEATURES) - width)
    unread = ("day", *RANK_FEATURES[width:])
    held_out = folds(questions)
    scores = []
    for held in held_out:
        cut = [
            Question(tuple((s, (*v[:width], *pad)) for s, v in q.turns), q.evidence,
                     q.evidence_count, q.conversation)
            for q in questions
        ]  # fmt: skip
        train = [q for q in cut if q.conversation != held]
        fit = fit_weights(train, fixed=unread)
        scores.append(recalls([q for q in cut if q.conversation == held], fit.weights))
    mean = {m: sum(s[m] for s in scores) / len(scores) for m in scores[0]}
    return {**mean, "objective": objective(mean)}


def rank_features_only(questions: Sequence[Question]) -> list[Question]:
    """The questions with every feature past ``TREE_RANK_FEATURES`` set to 0: LightGBM never
    splits on a constant, so a model fitted on them is the tree ranker over the linear
    ranker's own features (a diagnostic: is it the non-linearity or the added features)."""
    width = len(TREE_RANK_FEATURES)
    pad = (0.0,) * (len(TREE_FEATURES) - width)
    return [
        Question(
            tuple((s, (*v[:width], *pad)) for s, v in q.turns),
            q.evidence,
            q.evidence_count,
            q.conversation,
        )
        for q in questions
    ]


def model_json(ranker: Any, meta: dict[str, Any]) -> dict[str, Any]:
    """LightGBM's dumped trees in ``scroll_core.store.rank_trees``'s format: per tree the inner
    nodes' feature, threshold and children (an index, or ``~leaf``) and the leaf values."""
    dump = ranker.dump_model()
    if len(dump["feature_names"]) != len(TREE_FEATURES):
        raise ValueError("the model was fitted on other features")
    trees = []
    for info in dump["tree_info"]:
        root = info["tree_structure"]
        inner = info["num_leaves"] - 1
        tree: dict[str, list[Any]] = {
            "feature": [0] * inner,
            "threshold": [0.0] * inner,
            "left": [0] * inner,
            "right": [0] * inner,
            "leaf": [0.0] * info["num_leaves"],
        }

        def child(node: dict[str, Any], tree: dict[str, list[Any]] = tree) -> int:
            if "leaf_value" in node:
                tree["leaf"][node.get("leaf_index", 0)] = float(node["leaf_value"])
                return ~node.get("leaf_index", 0)
            if node["decision_type"] != "<=" or node["missing_type"] not in ("None", "NaN"):
                raise ValueError(f"unsupported split {node['decision_type']}")
            i = node["split_index"]
            tree["feature"][i] = node["split_feature"]
            tree["threshold"][i] = float(node["threshold"])
            tree["left"][i] = child(node["left_child"])
            tree["right"][i] = child(node["right_child"])
            return i

        child(root)
        trees.append(tree)
    return {"format": FORMAT, "features": list(TREE_FEATURES), "fit": meta, "trees": trees}


def fit_trees(
    questions: Sequence[Question],
    out: Path | None = None,
    grid: dict[str, tuple[Any, ...]] = GRID,
) -> TreeFit:
    """Cross-validate ``grid`` (the shipped ``GRID`` unless a test narrows it), refit the
    best setting on every dev question, write ``out``."""
    import lightgbm

    began = time.perf_counter()
    cv = cross_validate(questions, grid)
    best = cv["best"]
    setting = {k: best[k] for k in GRID}
    ranker = _fit(questions, setting, best["trees"])
    dev = tree_recalls(questions, _predictor(ranker))
    seconds = time.perf_counter() - began
    meta = {
        "fitted_on": "LoCoMo dev split (conv-26, conv-41, conv-43, conv-47, conv-49)",
        "objective": "lambdarank; chosen by leave-one-conversation-out mean of recall@5/@10",
        "lightgbm": lightgbm.__version__,
        "setting": {**setting, "trees": best["trees"]},
        "cv": best["cv"],
        "dev": dev,
    }
    model = model_json(ranker, meta)
    if out is not None:
        out.write_text(json.dumps(model, indent=None, separators=(",", ":")) + "\n")
    return TreeFit(model, {**setting, "trees": best["trees"]}, cv, dev, seconds)
