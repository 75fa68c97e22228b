"""The issue-15 ranking switches in ``SearchTuning``: speaker match, exact pieces, RM3-style
feedback and diversity across session-days. Each is off by default; each is shown here to
move the ranking the way it says, and to leave it alone when it has nothing to act on."""

from __future__ import annotations

from dataclasses import replace

import pytest
from search_corpus import add
from search_corpus import ranked as _ranked

from scroll_core import SearchTuning
from scroll_core.store.fts_query import exact_pattern, exact_pieces

# The hand formula with nothing on but bm25 (the learned ranker and speaker match off too).
PLAIN = replace(
    SearchTuning(),
    neighbour_weights=(),
    coverage_weight=0.0,
    proximity_weight=0.0,
    ranker_weights=(),
    speaker_weight=0.0,
)


@pytest.fixture
def log(store):
    # Each switch on both backends: SQLite, and PostgreSQL under ``python -m tests.servers``.
    return store


def ranked(log, query, tuning, k=5):
    return _ranked(log, query, tuning, k)


def test_exact_pieces_are_numbers_dates_versions_and_identifiers():
    query = 'What changed in v1.2.3 of "foo_bar.py" on 7 May 2023, at 3:30? Ask user@host.'
    assert exact_pieces(query) == ["v1.2.3", "foo_bar.py", "7", "2023", "3:30", "user@host"]
    assert exact_pieces("what did anyone say about hiking?") == []
    found = exact_pattern(["2023", "v1.2.3"]).findall("V1.2.3 shipped in 2023, not 12023")
    assert found == ["V1.2.3", "2023"]


def test_exact_match_puts_the_turn_with_the_verbatim_version_first(log):
    # SQLite's index splits "1.2.3" into "1", "2", "3"; PostgreSQL's keeps it one version
    # token; either way the turn scattering the words ranks first on bm25 and only one turn
    # holds "1.2.3" as written. A weight large enough to show the direction on both.
    scattered, verbatim = add(log, "release 3 of 2 after 1 release", "release 1.2.3 went out")
    add(log, *(f"filler {i}" for i in range(5)))
    assert ranked(log, "release 1.2.3", PLAIN)[0] == scattered
    assert ranked(log, "release 1.2.3", replace(PLAIN, exact_weight=10.0))[0] == verbatim


def test_speaker_match_prefers_what_the_named_person_said(log):
    (about,) = add(log, "I gave Ana a telescope for astronomy night", name="Ben")
    (by,) = add(log, "astronomy night was lovely", name="Ana")
    add(log, *(f"filler {i}" for i in range(5)), name="Ben")
    tuning = replace(PLAIN, rank_weights=(1.0, 2.0, 0.0))
    assert ranked(log, "Ana astronomy night", tuning)[0] == about
    assert ranked(log, "Ana astronomy night", replace(tuning, speaker_weight=1.0))[0] == by


def test_feedback_reranks_only_what_was_read_so_it_costs_no_second_search(log):
    (top,) = add(log, "the walrus colony sleeps on pebbly beaches near fjords", session="a")
    add(log, *(f"unrelated filler {i}" for i in range(8)), session="c")
    # Shares "pebbly beaches fjords" with the best hit but no query term, and sits far from
    # every candidate: feedback never reads it, so it cannot lift it.
    (far,) = add(log, "pebbly beaches and fjords again today", session="b")
    feedback = replace(PLAIN, feedback_docs=1, feedback_terms=5, feedback_weight=0.3)
    hits = ranked(log, "walrus colony", replace(feedback, neighbour_weights=(0.1,)))
    assert hits[0] == top and far not in hits


def test_feedback_lifts_an_unmatched_neighbour_that_shares_the_words(log):
    best, reply = add(log, "walrus colony on pebbly beaches near fjords", "pebbly fjords indeed")
    add(log, *(f"unrelated filler {i}" for i in range(8)), session="c")
    reach = replace(PLAIN, neighbour_weights=(0.0001,))
    feedback = replace(reach, feedback_docs=1, feedback_terms=5, feedback_weight=0.3)
    plain_hits = {h.seq: h for h in _search(log, "walrus colony", reach)}
    lifted = {h.seq: h for h in _search(log, "walrus colony", feedback)}
    assert lifted[reply].score > plain_hits[reply].score
    assert not lifted[reply].matched and lifted[best].matched


def _search(log, query, tuning):
    log.search_tuning = tuning
    return log.search(query, k=5)


def test_diversity_lets_a_second_day_into_a_short_list(log):
    monday = add(log, "kayak kayak", "kayak kayak trip", day="2026-01-05")
    (tuesday,) = add(log, "kayak lesson booked", session="s", day="2026-01-06")
    add(log, *(f"filler {i}" for i in range(5)), day="2026-01-07")
    assert ranked(log, "kayak", PLAIN, k=2) == monday[:2]
    assert ranked(log, "kayak", replace(PLAIN, diversity_weight=1.0), k=2) == [monday[0], tuesday]


def test_switches_at_zero_leave_the_shipped_ranking_alone(log):
    add(log, "alpha beta 2023", "beta gamma", "gamma alpha v1.2", name="Ana")
    add(log, *(f"filler {i}" for i in range(5)))
    shipped = SearchTuning()
    off = replace(
        shipped,
        exact_weight=0.0,
        feedback_docs=3,
        feedback_terms=0,
        feedback_weight=0.5,
        diversity_weight=0.0,
    )
    for query in ("alpha beta", "Ana gamma 2023", "v1.2 alpha"):
        assert ranked(log, query, off) == ranked(log, query, shipped)
