"""The learned linear ranker and window coverage (``SearchTuning.ranker_weights`` and
``window_weight``) and the dev-only fitting of the ranker's weights (``bench/_ranker_fit``)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from search_corpus import add, ranked

from scroll_core import EventLog, SearchTuning
from scroll_core.store.search import RANK_FEATURES, SearchFilters, search_features
from scroll_core.store.sqlite_search import SQLITE

HAND = replace(SearchTuning(), ranker_weights=())
# The hand formula's own weights written as a ranker: own 1, neighbours ±1 and ±2.
HAND_AS_RANKER = (1.0, *HAND.neighbour_weights, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)


@pytest.fixture
def log(store):
    # Both backends: SQLite, and PostgreSQL under ``python -m tests.servers``.
    return store


def _chat(log):
    add(log, "we hiked to the glacier lake", "the glacier was melting fast", session="a")
    add(log, "which lake did you swim in", "the cold lake by the cabin", session="a")
    add(log, "my sister visited the cabin", "she loved the lake and the hike", session="b")
    add(log, *(f"filler turn number {i}" for i in range(6)), session="c")


def test_the_ranker_at_the_hand_formulas_weights_ranks_as_the_hand_formula(log):
    _chat(log)
    as_ranker = replace(HAND, ranker_weights=HAND_AS_RANKER)
    for query in ("glacier lake", "cabin lake hike", "sister", "melting glacier cabin"):
        assert ranked(log, query, as_ranker) == ranked(log, query, HAND), query


def test_window_coverage_lifts_the_turn_whose_neighbour_holds_the_other_term(log):
    # "quokka" alone in both sessions; only session "b" has "mango" next to it.
    (lone,) = add(log, "the quokka quokka smiled", session="a")
    add(log, "nothing to see", session="a")
    paired, _ = add(log, "a quokka smiled", "it ate a ripe mango", session="b")
    add(log, *(f"filler {i} mango" for i in range(3)), session="c")
    add(log, *(f"filler {i}" for i in range(6)), session="d")
    off = replace(HAND, neighbour_weights=(0.0001,), coverage_weight=0.0, proximity_weight=0.0)
    order = ranked(log, "quokka mango", off)
    assert order.index(lone) < order.index(paired)
    order = ranked(log, "quokka mango", replace(off, window_weight=5.0))
    assert order.index(paired) < order.index(lone)


def test_the_shipped_ranker_prefers_the_answer_next_to_its_question(log):
    # The question names both terms; the reply that answers it holds one. A turn elsewhere
    # repeats that one term; the ranker's neighbour and window features pick the reply.
    question, reply = add(
        log, "what colour is your canoe paddle", "the paddle is bright orange", session="a"
    )
    (elsewhere,) = add(log, "I lost a paddle once", session="b")
    add(log, *(f"filler {i}" for i in range(6)), session="c")
    order = ranked(log, "canoe paddle colour", SearchTuning())
    assert order[0] == question
    assert order.index(reply) < order.index(elsewhere)


def test_features_are_one_tuple_per_turn_read_and_shares_stay_in_range(tmp_path):
    with EventLog(tmp_path / "f.sqlite3") as log:
        _chat(log)
        features = search_features(
            log._reader(), "glacier lake cabin", 10, SearchFilters(), SearchTuning(), SQLITE
        )
        assert features and all(len(v) == len(RANK_FEATURES) for v in features.values())
        at = {name: i for i, name in enumerate(RANK_FEATURES)}
        for values in features.values():
            assert 0.0 <= values[at["own"]] <= 1.0
            assert 0.0 <= values[at["coverage"]] <= values[at["window_coverage"]] <= 1.0
        assert max(v[at["own"]] for v in features.values()) == 1.0
        # Nothing to match, or only stop words: nothing read.
        for nothing in ("zebra", ""):
            read = search_features(
                log._reader(), nothing, 10, SearchFilters(), SearchTuning(), SQLITE
            )
            assert read == {}


@pytest.fixture
def ranker_fit(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "bench"))
    import importlib

    return importlib.import_module("bench._ranker_fit")


def test_fitting_moves_a_weight_only_when_dev_recall_rises(ranker_fit):
    q = ranker_fit.Question

    # Evidence 2 wins only with window coverage weighed; the hand formula puts 1 first.
    # Ten more turns per question push the evidence out of the top 10 at the start.
    def v(*values: float) -> tuple[float, ...]:
        return (*values, *[0.0] * (len(RANK_FEATURES) - len(values)))

    noise = tuple((100 + i, v(0.6)) for i in range(10))
    questions = [
        q(turns=((1, v(0.9, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0)),
                 (2, v(0.3, 0.0, 0.0, 0.0, 1.0)), *noise),
          evidence=frozenset({2}), evidence_count=1),
        q(turns=((3, v(1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0)), *noise),
          evidence=frozenset({3}), evidence_count=1),
    ]  # fmt: skip
    fit = ranker_fit.fit_weights(questions)
    assert fit.start_dev["recall_at_10"] == 0.5
    assert fit.dev["recall_at_10"] == 1.0
    assert fit.weights[0] == 1.0 and fit.weights[RANK_FEATURES.index("window_coverage")] > 0
    assert ranker_fit.fit_weights(questions) == fit  # deterministic
    # Nothing to gain: the starting weights stay.
    solved = [questions[1]]
    assert ranker_fit.fit_weights(solved).weights == ranker_fit.START
    with pytest.raises(ValueError, match="starting weights"):
        ranker_fit.fit_weights(questions, start=(1.0, 0.4))
    # A feature held fixed keeps its weight, even where moving it would gain.
    held = ranker_fit.fit_weights(questions, fixed=("window_coverage", "rare_window_coverage"))
    assert held.weights[RANK_FEATURES.index("window_coverage")] == 0.0
    with pytest.raises(ValueError, match="no such ranker feature: colour"):
        ranker_fit.fit_weights(questions, fixed=("colour",))


def test_fitting_reads_dev_questions_only(ranker_fit, tmp_path):
    from bench._locomo_baseline import Item

    test_only = [Item("conv-30", "anything", "single_hop", frozenset({("conv-30", "D1:1")}))]
    with (
        EventLog(tmp_path / "f.sqlite3") as log,
        pytest.raises(ValueError, match="no dev-split items"),
    ):
        ranker_fit.collect(log, test_only, lambda i: frozenset(), HAND, lambda i: "s")


def test_a_term_most_turns_read_hold_weighs_less_in_the_rare_shares(tmp_path):
    with EventLog(tmp_path / "r.sqlite3") as log:
        (rare,) = add(log, "an otter in the river", session="a")
        common = add(log, *(f"the river bend number {i}" for i in range(6)), session="b")
        features = search_features(log._reader(), "otter river", 10, SearchFilters(), HAND, SQLITE)
        at = {name: i for i, name in enumerate(RANK_FEATURES)}
        only_common = features[common[0]]
        assert only_common[at["coverage"]] == 0.5
        assert only_common[at["rare_coverage"]] < 0.5 < features[rare][at["rare_coverage"]]
        assert features[rare][at["rare_coverage"]] == 1.0  # it holds both


def test_the_oracle_ceiling_counts_the_evidence_read_at_most_k(ranker_fit):
    q = ranker_fit.Question
    turn = (0.0,) * len(RANK_FEATURES)
    questions = [
        # Two of three evidence turns were read: no re-ranking reaches more than 2/3.
        q(turns=((1, turn), (2, turn), (9, turn)), evidence=frozenset({1, 2, 3}), evidence_count=3),
        # Evidence never read.
        q(turns=((5, turn),), evidence=frozenset({6}), evidence_count=1),
    ]
    assert ranker_fit.ceiling(questions) == pytest.approx((2 / 3 + 0) / 2)
    assert ranker_fit.ceiling(questions, k=1) == pytest.approx((1 / 3) / 2)


def test_the_array_scorer_ranks_exactly_as_the_plain_loop(ranker_fit):
    # Random features with repeated values (ties broken by the lower seq), turns scoring 0 or
    # less (never ranked), evidence counted beyond what was read: the fit's scorer must give
    # the plain loop's figures for any weights.
    import random

    rng = random.Random(7)
    width = len(RANK_FEATURES)
    questions = []
    for i in range(40):
        turns = tuple(
            (seq, tuple(rng.choice((0.0, 0.0, 0.5, 1.0, rng.random())) for _ in range(width)))
            for seq in rng.sample(range(1000), rng.randint(1, 30))
        )
        evidence = frozenset(rng.sample([s for s, _ in turns], min(3, len(turns))))
        questions.append(
            ranker_fit.Question(turns, evidence, len(evidence) + i % 2, f"conv-{i % 4}")
        )
    scorer = ranker_fit._Scorer(questions)
    for _ in range(25):
        weights = [rng.choice((-1.0, 0.0, 0.3, 1.0)) for _ in range(width)]
        assert scorer(weights) == pytest.approx(ranker_fit.recalls(questions, weights), abs=1e-12)
    with pytest.raises(ValueError, match=f"{width} weights needed"):
        scorer([1.0])
    # Leave-one-conversation-out: each conversation scored by weights fitted on the other
    # three, averaged over questions (not over conversations: these hold 10 each, so the
    # uneven split below tells the two apart).
    uneven = questions + [
        ranker_fit.Question(q.turns, q.evidence, q.evidence_count, "conv-0") for q in questions[:8]
    ]
    expected = {"recall_at_5": 0.0, "recall_at_10": 0.0}
    for held in ("conv-0", "conv-1", "conv-2", "conv-3"):
        train = [q for q in uneven if q.conversation != held]
        test = [q for q in uneven if q.conversation == held]
        got = ranker_fit.recalls(test, ranker_fit.fit_weights(train).weights)
        for metric in expected:
            expected[metric] += got[metric] * len(test) / len(uneven)
    assert ranker_fit.cross_validate(uneven) == pytest.approx(expected)
    with pytest.raises(ValueError, match="two conversations"):
        ranker_fit.cross_validate([q for q in questions if q.conversation == "conv-0"])


def test_a_questions_weight_is_its_share_of_the_mean_recall(ranker_fit):
    # Two questions, one found at rank 1 and one not read: weighted 3 to 1, the mean is 3/4
    # in both scorers; a weight of 0 or less is refused rather than dividing by it.
    width = len(RANK_FEATURES)
    one = (1.0,) + (0.0,) * (width - 1)
    found = ranker_fit.Question(((1, one),), frozenset({1}), 1, "a", weight=3.0)
    missed = ranker_fit.Question(((2, one),), frozenset({9}), 1, "b")
    weights = [1.0] + [0.0] * (width - 1)
    for score in (
        ranker_fit._Scorer([found, missed]),
        lambda w: ranker_fit.recalls([found, missed], w),
    ):
        assert score(weights) == {"recall_at_5": 0.75, "recall_at_10": 0.75}
    assert ranker_fit.recalls([found, replace(missed, weight=1.0 / 3)], weights)[
        "recall_at_10"
    ] == pytest.approx(0.9)
    for bad in (0.0, -1.0):
        with pytest.raises(ValueError, match="weight must be positive"):
            ranker_fit._Scorer([replace(found, weight=bad)])
        with pytest.raises(ValueError, match="weight must be positive"):
            ranker_fit.recalls([replace(found, weight=bad)], weights)
