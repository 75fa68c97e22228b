"""The bounds that keep the ranker close to plain BM25 (issue 34): ``SearchTuning``'s
``bm25_margin``, ``ranker_share`` and the shape switch ``long_turn_words``, on both
backends."""

from __future__ import annotations

from dataclasses import replace

import pytest
from search_corpus import add, ranked

from scroll_core import SearchTuning
from scroll_core.errors import ConfigError
from scroll_core.store import search_bounds
from scroll_core.store.search_bounds import bounded, candidate_words, mixed

SHIPPED = SearchTuning()
# The ranker without any bound: the shipped search before issue 34.
UNBOUNDED = replace(SHIPPED, ranker_share=1.0, bm25_margin=-1, long_turn_words=0)
# BM25's own order: no ranker, no neighbours, no rescoring.
BM25 = replace(
    SHIPPED,
    ranker_weights=(),
    neighbour_weights=(),
    coverage_weight=0.0,
    proximity_weight=0.0,
    speaker_weight=0.0,
    ranker_share=1.0,
    bm25_margin=-1,
    long_turn_words=0,
)
QUERIES = ("canoe paddle colour", "glacier lake cabin", "orange paddle", "sister hike lake")


@pytest.fixture
def log(store):
    # Both backends: SQLite, and PostgreSQL under ``python -m tests.servers``.
    return store


def _chat(log, words: int = 0) -> None:
    """Questions and the replies that answer them, with ``words`` of padding per turn."""
    pad = " ".join(f"pad{i}" for i in range(words))
    add(log, f"what colour is your canoe paddle {pad}", f"it is bright orange {pad}", session="a")
    add(log, f"we hiked to the glacier lake {pad}", f"the cabin by the lake {pad}", session="a")
    add(log, f"my sister loved the hike {pad}", f"the lake was cold {pad}", session="b")
    add(log, f"an orange canoe in the shop {pad}", f"a paddle on sale {pad}", session="c")
    add(log, *(f"filler turn {i} {pad}" for i in range(6)), session="d")


def _bm25_first(log, query: str, tuning: SearchTuning) -> None:
    """BM25's candidates lead in BM25's order; turns read only as neighbours follow."""
    bm25 = ranked(log, query, BM25)
    top = ranked(log, query, tuning)
    assert top[: len(bm25)] == bm25, query
    assert len(top) > len(bm25) or set(top) == set(bm25)


def test_margin_zero_is_bm25s_order(log):
    _chat(log)
    for query in QUERIES:
        _bm25_first(log, query, replace(UNBOUNDED, bm25_margin=0))


def test_the_top_k_always_holds_bm25s_top_k_minus_the_margin(log):
    _chat(log)
    moved = False
    for query in QUERIES:
        plain = ranked(log, query, BM25, k=10)
        free = ranked(log, query, UNBOUNDED, k=4)
        for margin in (1, 2, 3):
            for k in (2, 3, 4):
                top = ranked(log, query, replace(UNBOUNDED, bm25_margin=margin), k=k)
                assert set(plain[: max(0, k - margin)]) <= set(top), (query, margin, k)
                assert len(top) == len(set(top))
        moved |= free[:2] != plain[:2]
    # The corpus gives the ranker something to reorder, so the bound is exercised.
    assert moved


def test_bounded_scores_never_rise_down_the_list(log):
    _chat(log)
    log.search_tuning = replace(UNBOUNDED, bm25_margin=1)
    for query in QUERIES:
        scores = [h.score for h in log.search(query, k=8)]
        assert scores == sorted(scores, reverse=True)


def test_share_zero_is_bm25s_order_and_share_one_the_rankers(log):
    _chat(log)
    for query in QUERIES:
        bm25 = ranked(log, query, BM25)
        assert ranked(log, query, replace(UNBOUNDED, ranker_share=0.0))[: len(bm25)] == bm25
        assert ranked(log, query, replace(UNBOUNDED, ranker_share=1.0)) == ranked(
            log, query, UNBOUNDED
        )


def test_the_shape_switch_bounds_long_turns_only(log):
    _chat(log, words=0)
    short_long = replace(UNBOUNDED, bm25_margin=0, long_turn_words=40)
    changed = [q for q in QUERIES if ranked(log, q, UNBOUNDED) != ranked(log, q, BM25)]
    assert changed
    for query in QUERIES:  # short turns: the switch leaves the ranker's order
        assert ranked(log, query, short_long) == ranked(log, query, UNBOUNDED)


def test_the_shape_switch_bounds_a_search_over_long_turns(log):
    _chat(log, words=60)
    switched = replace(UNBOUNDED, bm25_margin=0, long_turn_words=40)
    for query in QUERIES:
        _bm25_first(log, query, switched)


def test_candidate_words_is_the_median_length_of_bm25s_candidates():
    rows = {1: (1, "s", None, "a b c", None), 2: (2, "s", None, "a " * 9, None),
            3: (3, "s", None, None, None)}  # fmt: skip
    assert candidate_words(rows, {1: 1.0, 2: 0.5}) == 6.0
    assert candidate_words(rows, {1: 1.0, 2: 0.5, 3: 0.1}) == 3.0
    assert candidate_words(rows, {}) == 0.0


@pytest.mark.parametrize(
    "bad", [{"ranker_share": 1.5}, {"ranker_share": -0.1}, {"bm25_margin": -2}]
)
def test_bad_bounds_are_refused(bad):
    with pytest.raises(ConfigError):
        replace(SHIPPED, **bad)


def test_the_floor_places_bm25s_candidates_no_lower_than_their_rank_plus_the_margin():
    base = {1: 5.0, 2: 4.0, 3: 3.0, 4: 2.0, 5: 1.0}
    ranked = [(5, 9.0), (4, 8.0), (9, 7.5), (3, 7.0), (2, 6.0), (1, 5.0)]  # 9: a neighbour
    assert [s for s, _ in bounded(ranked, base, 6, 0)] == [1, 2, 3, 4, 5, 9]
    one = bounded(ranked, base, 6, 1)
    assert [s for s, _ in one] == [5, 1, 2, 3, 4, 9]
    assert [s for s, _ in bounded(ranked, base, 3, 2)] == [5, 4, 1]
    for margin in (0, 1, 2, 3):
        top = [s for s, _ in bounded(ranked, base, 6, margin)]
        order = sorted(base, key=lambda s: -base[s])
        assert all(top.index(seq) <= r + margin for r, seq in enumerate(order))
    assert [v for _, v in one] == sorted((v for _, v in one), reverse=True)


def test_the_mix_at_share_zero_is_bm25_and_keeps_neighbours_below():
    scores = {1: 1.0, 2: 3.0, 9: 2.0}
    base = {1: 4.0, 2: 2.0}
    assert mixed(scores, base, 0.0) == {1: 1.0, 2: 0.5}
    half = mixed(scores, base, 0.5)
    assert half[2] > half[1] > half[9] > 0


@pytest.mark.parametrize(
    "texts",
    [
        ["one two three", "four", "", "a b c d e f"],
        ["single spaced", "double  spaced"],
        [" leading", "trailing "],
        ["tab\tinside", "plain words"],
        ["new\nline", "plain words"],
        ["café au lait", "plain words"],
        ["no\u00a0break", "plain words"],
        ["unit\x1fsep", "file\x1csep", "vt\x0bff\x0ccr\r"],
        ["nul\x00 inside", "ok"],
        ["", ""],
        [],
    ],
)
def test_word_counts_are_the_split_counts(texts):
    assert search_bounds.word_counts(texts) == [len(t.split()) for t in texts]


def test_word_counts_on_every_whitespace_code_point():
    spaces = [chr(c) for c in range(0x3000 + 1) if chr(c).isspace()]
    for space in spaces:
        texts = [f"a{space}b c", "d e", f"{space}f", f"g{space}"]
        assert search_bounds.word_counts(texts) == [len(t.split()) for t in texts], hex(ord(space))


def test_best_is_the_first_k_of_the_full_sort():
    import random

    rng = random.Random(36)
    for trial in range(300):
        size = rng.randint(0, 60)
        # Few distinct scores, so ties are common; seqs in no particular order.
        values = [rng.choice([0.5, 1.0, 1.5, 2.0, 0.1 * trial + 0.3]) for _ in range(size)]
        scores = dict(zip(rng.sample(range(10_000), size), values, strict=True))
        full = sorted(sorted(scores.items()), key=lambda item: item[1], reverse=True)
        for k in (0, 1, 3, 10, size, size + 5):
            assert search_bounds.best(scores, k) == full[:k], (trial, k)
