"""The tree ranker (``SearchTuning.ranker_trees``): a LambdaMART model shipped as JSON and
walked in pure Python (``scroll_core.store.rank_trees``), its fit (``bench/_tree_fit.py``), and
a bad model file named when the tuning is built."""

from __future__ import annotations

import json
import math
import random
from dataclasses import replace
from pathlib import Path

import lightgbm
import numpy
import pytest
from search_corpus import add, ranked

from bench._ranker_fit import Question
from bench._tree_fit import GRID, fit_trees, model_json, tree_recalls
from scroll_core import ConfigError, EventLog, SearchTuning
from scroll_core.store.rank_trees import FORMAT, SHIPPED_TREES, load_trees, trees_from_dict
from scroll_core.store.search import TREE_FEATURES, SearchFilters, search_features
from scroll_core.store.sqlite_search import SQLITE


def _shipped() -> SearchTuning:
    return replace(SearchTuning(), ranker_trees="shipped")


@pytest.fixture
def log(store):
    # Both backends: SQLite, and PostgreSQL under ``python -m tests.servers``.
    return store


def _random_booster(monotone: bool, seed: int) -> lightgbm.Booster:
    rng = random.Random(seed)
    width = len(TREE_FEATURES)
    rows = numpy.asarray(
        [[rng.choice((0.0, 0.5, 1.0, rng.random() * 3)) for _ in range(width)] for _ in range(600)]
    )
    # Relevance follows a non-linear mix of a few features, so the trees have splits to learn.
    labels = numpy.asarray([int(r[0] > 0.6 or (r[1] > 0.4 and r[3] < 0.5)) for r in rows])
    params = {
        "objective": "lambdarank",
        "num_iterations": 30,
        "num_leaves": 8,
        "min_data_in_leaf": 5,
        "learning_rate": 0.1,
        "num_threads": 1,
        "deterministic": True,
        "verbose": -1,
        "seed": seed,
    }
    if monotone:
        params["monotone_constraints"] = [1] + [0] * (width - 1)
    data = lightgbm.Dataset(rows, labels, group=[20] * 30, feature_name=list(TREE_FEATURES))
    return lightgbm.train(params, data)


@pytest.mark.parametrize("monotone", [False, True])
def test_the_pure_python_walk_gives_lightgbms_own_predictions(monotone):
    booster = _random_booster(monotone, seed=7)
    model = model_json(booster, {})
    ranker = trees_from_dict(json.loads(json.dumps(model)), TREE_FEATURES)
    assert ranker.trees == booster.num_trees()
    rng = random.Random(3)
    thresholds = [t for tree in model["trees"] for t in tree["threshold"]]
    rows = [[rng.random() * 3 for _ in TREE_FEATURES] for _ in range(300)]
    # Values exactly on a split's threshold go left, as in LightGBM.
    rows += [[rng.choice(thresholds) for _ in TREE_FEATURES] for _ in range(300)]
    expected = booster.predict(numpy.asarray(rows))
    got = [ranker.score(row) for row in rows]
    assert got == pytest.approx(list(expected), rel=0, abs=1e-12)
    assert len(set(got)) > 10  # the trees really split


def test_the_shipped_model_loads_and_reads_the_searchs_features():
    ranker = load_trees(SHIPPED_TREES, TREE_FEATURES)
    model = json.loads(SHIPPED_TREES.read_text())
    assert ranker.features == TREE_FEATURES
    # Kept small: at most 100 trees of at most 8 leaves.
    assert 0 < ranker.trees == len(model["trees"]) <= 100
    assert all(len(tree["leaf"]) <= max(GRID["num_leaves"]) for tree in model["trees"])
    assert model["fit"]["fitted_on"].startswith("LoCoMo dev split")
    assert _shipped().trees is ranker  # loaded once per file


def _write(tmp_path: Path, model: object, name: str = "model.json") -> str:
    path = tmp_path / name
    path.write_text(model if isinstance(model, str) else json.dumps(model))
    return str(path)


def _one_split(feature: int, threshold: float = 0.5) -> dict:
    return {
        "format": FORMAT,
        "features": list(TREE_FEATURES),
        "trees": [
            {"feature": [feature], "threshold": [threshold], "left": [-1], "right": [-2],
             "leaf": [0.0, 1.0]}
        ],
    }  # fmt: skip


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ("not json {", "not a JSON model"),
        ({"format": "xgboost", "trees": []}, "not a scroll-tree-ranker/1 model"),
        ({**_one_split(0), "features": ["own", "bm25"]}, "fitted on features"),
        ({**_one_split(0), "trees": []}, "needs 1 to"),
        ({**_one_split(0), "trees": [{"feature": [0]}]}, "has no 'threshold'"),
        (_one_split(len(TREE_FEATURES)), "splits on feature"),
        ({**_one_split(0), "trees": [{**_one_split(0)["trees"][0], "left": [-5]}]}, "leaf 4"),
        ({**_one_split(0), "trees": [{**_one_split(0)["trees"][0], "left": [0]}]}, "node 0"),
        ({**_one_split(0), "trees": [{**_one_split(0)["trees"][0], "leaf": [0.0, "1"]}]},
         "must be a number"),
        ({**_one_split(0), "trees": [{**_one_split(0)["trees"][0], "leaf": [0.0]}]},
         "lists disagree"),
        ({**_one_split(0), "trees": [{**_one_split(0)["trees"][0], "threshold": [1e999]}]},
         "must be finite"),
    ],
)  # fmt: skip
def test_a_bad_model_file_is_a_config_error_when_the_tuning_is_built(tmp_path, model, message):
    path = _write(tmp_path, model)
    with pytest.raises(ConfigError, match=message):
        SearchTuning(ranker_trees=path)


def test_a_missing_model_file_is_named_and_the_log_keeps_searching(tmp_path):
    with EventLog(tmp_path / "t.sqlite3") as log:
        (seq,) = add(log, "the glacier lake was cold")
        before = log.search_tuning
        with pytest.raises(ConfigError, match="cannot read it"):
            log.search_tuning = SearchTuning(ranker_trees=str(tmp_path / "absent.json"))
        # Nothing lost: the log, its tuning and its search are as they were.
        assert log.search_tuning is before
        assert [h.seq for h in log.search("glacier")] == [seq]


def test_a_model_file_given_by_path_ranks_the_search(log, tmp_path):
    # One tree: a turn longer than five words scores 1, a shorter one 0; BM25 puts the short
    # turn first (the same term in fewer words).
    length = TREE_FEATURES.index("length")
    (short,) = add(log, "the lake", session="a")
    (long,) = add(log, "we swam across the cold lake all afternoon with friends", session="b")
    add(log, *(f"filler turn {i}" for i in range(6)), session="c")
    assert ranked(log, "lake", SearchTuning())[0] == short
    by_length = SearchTuning(ranker_trees=_write(tmp_path, _one_split(length, math.log1p(5))))
    assert ranked(log, "lake", by_length)[0] == long


def test_the_shipped_trees_prefer_the_answer_next_to_its_question(log):
    question, reply = add(
        log, "what colour is your canoe paddle", "the paddle is bright orange", session="a"
    )
    (elsewhere,) = add(log, "I lost a paddle once", session="b")
    add(log, *(f"filler {i}" for i in range(6)), session="c")
    order = ranked(log, "canoe paddle colour", _shipped())
    assert order[0] == question
    assert order.index(reply) < order.index(elsewhere)


def test_the_shipped_trees_rank_the_same_way_every_time(log):
    for i in range(4):
        add(log, f"hike {i} to the glacier lake", "it was cold", "the cabin", session=f"s{i}")
    log.search_tuning = _shipped()
    first = [(h.seq, h.score) for h in log.search("glacier lake cabin", 10)]
    assert len(first) == 10
    for _ in range(3):
        assert [(h.seq, h.score) for h in log.search("glacier lake cabin", 10)] == first


def test_tree_features_extend_the_rank_features_and_stay_in_range(tmp_path):
    with EventLog(tmp_path / "f.sqlite3") as log:
        add(log, "we hiked to the glacier lake", "the glacier was melting fast", session="a")
        add(log, "which lake did you swim in", "the cold lake by the cabin", session="a")
        add(log, *(f"filler turn number {i}" for i in range(6)), session="c")
        features = search_features(
            log._reader(),
            "glacier lake cabin",
            10,
            SearchFilters(),
            SearchTuning(),
            SQLITE,
            trees=True,
        )
    at = {name: i for i, name in enumerate(TREE_FEATURES)}
    assert features and all(len(v) == len(TREE_FEATURES) for v in features.values())
    for values in features.values():
        assert 0.0 <= values[at["bm25_rank"]] <= 1.0
        assert values[at["query_terms"]] == 3.0
        assert values[at["terms_held"]] == round(values[at["coverage"]] * 3)
    # The best BM25 candidate is first in the order; a turn read only as a neighbour is last.
    assert min(v[at["bm25_rank"]] for v in features.values()) == 0.0
    assert max(v[at["bm25_rank"]] for v in features.values()) == 1.0


def test_tree_recalls_order_by_score_then_seq():
    q = Question(((1, (0.0,)), (2, (1.0,)), (3, (1.0,))), frozenset({3}), 1, "c")
    assert tree_recalls([q], lambda rows, _: [r[0] for r in rows]) == {
        "recall_at_5": 1.0,
        "recall_at_10": 1.0,
    }


def _questions(seed: int) -> list[Question]:
    """Questions over three conversations whose evidence turn is the one with the most own
    bm25 when the query is long and the most neighbour mass when it is short: an interaction
    a weighted sum cannot express."""
    rng = random.Random(seed)
    out = []
    for i in range(90):
        short = i % 2 == 0
        turns = []
        for seq in range(20):
            values = [rng.random() for _ in TREE_FEATURES]
            values[TREE_FEATURES.index("query_terms")] = 2.0 if short else 6.0
            turns.append((seq, tuple(values)))
        key = TREE_FEATURES.index("near_1" if short else "own")
        best = max(turns, key=lambda t: t[1][key])[0]
        out.append(Question(tuple(turns), frozenset({best}), 1, f"conv-{i % 3}"))
    return out


# Two values on two of the grid's axes: four settings to choose among, where the shipped grid's
# sixteen took 50 s of CI on 2 cores; the choosing is the same code.
SMALL_GRID = {
    "num_leaves": (4, 8),
    "min_child_samples": (50,),
    "learning_rate": (0.05, 0.1),
    "monotone": (True,),
}


def test_the_fit_chooses_by_held_out_conversations_and_writes_a_model_the_core_reads(tmp_path):
    questions = _questions(1)
    out = tmp_path / "trees.json"
    fit = fit_trees(questions, out, SMALL_GRID)
    assert len(fit.cv["results"]) == 4 * len({r["trees"] for r in fit.cv["results"]})
    assert fit.cv["folds"] == ["conv-0", "conv-1", "conv-2"]
    assert fit.setting == {k: fit.cv["best"][k] for k in (*GRID, "trees")}
    assert fit.cv["best"]["objective"] == max(r["objective"] for r in fit.cv["results"])
    # Held-out conversations are ranked far better than chance (1 evidence turn in 20).
    assert fit.cv["best"]["cv"]["recall_at_5"] > 0.5
    ranker = load_trees(out, TREE_FEATURES)
    assert ranker.trees == fit.setting["trees"]
    # The same data gives the same model.
    assert (
        fit_trees(questions, grid=SMALL_GRID).model["trees"] == json.loads(out.read_text())["trees"]
    )


@pytest.mark.parametrize(
    "grid",
    [{**SMALL_GRID, "num_leaves": ()}, {k: v for k, v in SMALL_GRID.items() if k != "monotone"}],
)
def test_a_grid_without_a_value_for_every_setting_is_refused(grid):
    with pytest.raises(ValueError, match="a grid names a value or more"):
        fit_trees(_questions(1), grid=grid)
