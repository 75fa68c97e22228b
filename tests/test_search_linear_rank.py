"""``linear_rank.linear_scores``, the column-wise scoring ``run_search`` takes for the
learned linear ranker, gives the same scores to the last bit as the feature-tuple reference
(``search._linear_scores``), so the same top k: on a seeded log with ties, speakers the query
names, headlines, non-ASCII text, date filters and agent scopes."""

from __future__ import annotations

import itertools
import random
from dataclasses import replace

import pytest

from scroll_core import EventLog, SearchTuning
from scroll_core.store import fts_query, linear_rank
from scroll_core.store.search import SearchFilters, _linear_scores, _read_pool, _term_rarity
from scroll_core.store.sqlite_search import SQLITE
from scroll_core.store.term_match import TermMatcher

WORDS = (
    "glacier lake cabin hiking hiked hike paddle canoe orange mango quokka sister melting "
    "river bridge camera tripod lantern summit ridge valley meadow harbour ferry island "
    "painting painter painted kitchen recipe bread oven flour garden tomato basil"
).split()
ODD = ["Straße", "café", "naïve", "İstanbul", "v1.2.3", "2023-10-13", "x_ray"]
NAMES = ["ana", "ben", None]
DAYS = ["2026-01-01", "2026-01-02", "2026-01-03"]


def seeded(log, seed: int = 36) -> None:
    """About 300 turns over three agents' sessions and three days; every tenth repeats an
    earlier turn word for word (bm25 ties), some carry a headline, some non-ASCII words."""
    rng = random.Random(seed)
    events = []
    for i in range(300):
        if i % 10 == 9:
            content = events[rng.randrange(len(events))]["content"]
        else:
            words = rng.choices(WORDS, k=rng.randint(3, 14))
            if rng.random() < 0.15:
                words.append(rng.choice(ODD))
            if rng.random() < 0.1:
                words.append(rng.choice(["ana", "ben"]))
            content = " ".join(words) + rng.choice(["", "?", ".", "!"])
        events.append(
            {
                "session_id": f"s{i // 60}",
                "agent_id": f"a{i // 120}",
                "kind": "chat_turn",
                "role": "user",
                "name": NAMES[i % 3],
                "content": content,
                "headline": " ".join(rng.choices(WORDS, k=3)) if rng.random() < 0.1 else None,
                "created_at": f"{DAYS[(i // 20) % 3]}T00:{i // 60:02d}:{i % 60:02d}Z",
            }
        )
    log.append_many(events)


def queries(seed: int = 7, n: int = 40) -> list[str]:
    rng = random.Random(seed)
    out = ["what did ana say about the lake", "ben hiking glacier", "Straße café", "hike hiked"]
    for _ in range(n):
        out.append(" ".join(rng.sample(WORDS + ODD, rng.randint(1, 4))))
    return out


FILTERS = [
    {},
    {"agent_id": "a1"},
    {"since": "2026-01-02", "until": "2026-01-03"},
    {"agent_id": "a0", "since": "2026-01-02"},
    {"session_id": "s3"},
    {"speaker": "ana"},
]

TUNINGS = {
    "shipped": SearchTuning(),
    "log_rarity": SearchTuning(term_rarity="log"),
    "one_neighbour": SearchTuning(neighbour_weights=(0.4,)),
    "three_neighbours": SearchTuning(neighbour_weights=(0.4, 0.5, 0.2)),
    "short_weights": SearchTuning(ranker_weights=(1.0, 0.5, 0.0, 0.3)),
    "every_feature": SearchTuning(
        ranker_weights=(1.0, 0.6, 0.4, 0.2, 0.1, 0.4, 1.0, 1.5), speaker_weight=0.0
    ),
    "no_term_features": SearchTuning(coverage_weight=0.0, proximity_weight=0.0),
    "unbounded": SearchTuning(ranker_share=1.0),
}


@pytest.fixture
def seeded_log(tmp_path):
    with EventLog(tmp_path / "eventlog.sqlite3") as log:
        seeded(log)
        yield log


@pytest.mark.parametrize("name", list(TUNINGS))
def test_the_column_scores_are_the_reference_scores_to_the_last_bit(seeded_log, name):
    tuning = TUNINGS[name]
    weights = tuning.ranker_weights
    assert linear_rank.supports(tuning, weights)
    db = seeded_log._reader()
    compared = 0
    for options in FILTERS:
        filters = SearchFilters(**options)
        for query in queries():
            terms = fts_query.query_terms(query)
            rows, base = _read_pool(db, terms, 10, filters, tuning, SQLITE)
            if not base:
                continue
            rarity = _term_rarity(db, terms, filters, tuning, SQLITE, None)
            expected = _linear_scores(rows, base, query, terms, tuning, rarity, weights)
            got = linear_rank.linear_scores(
                rows, base, terms, tuning, rarity, weights, TermMatcher(terms)
            )
            assert got == expected, (query, options)
            compared += 1
    assert compared > 150  # the filters and queries do reach the ranker


def test_the_seeded_log_has_ties_and_text_off_the_fast_path(seeded_log):
    # What the comparison above is meant to cover is there to cover.
    hits = seeded_log.search("glacier lake cabin", k=50)
    scores = [h.score for h in hits]
    assert len(scores) != len(set(scores))
    assert seeded_log.search("Straße café", k=5)


@pytest.mark.parametrize("name", ["shipped", "log_rarity", "three_neighbours"])
def test_a_search_returns_the_reference_ranking(store, monkeypatch, name):
    # The same searches through ``EventLog.search`` on each backend, with the column scores
    # and then with the reference, give the same hits: seqs, scores, snippets, order.
    seeded(store)
    store.search_tuning = TUNINGS[name]
    searches = [(query, options) for query in queries(n=20) for options in FILTERS]
    fast = [store.search(query, k=10, **options) for query, options in searches]
    monkeypatch.setattr(linear_rank, "supports", lambda tuning, weights: False)
    reference = [store.search(query, k=10, **options) for query, options in searches]
    assert fast == reference
    assert sum(len(hits) for hits in fast) > 500


def test_what_the_column_scores_do_not_cover_takes_the_reference(seeded_log):
    shipped = SearchTuning()
    for tuning in (
        replace(shipped, exact_weight=0.5),
        replace(shipped, feedback_docs=3, feedback_terms=10, feedback_weight=0.1),
        replace(shipped, ranker_weights=(*shipped.ranker_weights, 0.5)),  # "day"
    ):
        assert not linear_rank.supports(tuning, tuning.ranker_weights)
        seeded_log.search_tuning = tuning
        assert seeded_log.search("glacier lake", k=5)


def test_closest_is_the_nearest_pair_of_positions():
    rng = random.Random(11)
    words = ["hiking", "Hiked", "paint", "x-ray", "42nd", "lake", "the", "(glacier", "a_b"]
    for terms in (["hiking", "paint"], ["lake", "glacier", "42nd"], ["ray", "paint", "b"]):
        matcher = TermMatcher(terms)
        for _ in range(200):
            text = " ".join(rng.choice(words) for _ in range(rng.randint(0, 15)))
            positions = matcher.positions(text)
            pairs = [b[0] - a[0] for a, b in itertools.pairwise(positions) if a[1] != b[1]]
            assert matcher.plain(text)
            assert matcher.closest(text) == min(pairs, default=0), (terms, text)


def test_the_column_scores_do_not_depend_on_the_order_rows_are_read_in(seeded_log):
    # SQLite reads the pool in seq order; PostgreSQL need not. The neighbours are found by
    # seq order either way (``linear_rank._two_either_side`` sorts when it must).
    tuning = TUNINGS["shipped"]
    db = seeded_log._reader()
    rng = random.Random(5)
    compared = 0
    for query in queries():
        terms = fts_query.query_terms(query)
        rows, base = _read_pool(db, terms, 10, SearchFilters(), tuning, SQLITE)
        if not base:
            continue
        shuffled = list(rows.items())
        rng.shuffle(shuffled)
        expected = _linear_scores(rows, base, query, terms, tuning, None, tuning.ranker_weights)
        got = linear_rank.linear_scores(
            dict(shuffled), base, terms, tuning, None, tuning.ranker_weights, TermMatcher(terms)
        )
        assert got == expected, query
        compared += 1
    assert compared > 30
