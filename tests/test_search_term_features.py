"""The term features ``SearchTuning`` can switch on: query-term coverage and proximity."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scroll_core import EventLog, SearchTuning

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
def log(tmp_path):
    with EventLog(tmp_path / "eventlog.sqlite3") as log:
        yield log


def add(log, *texts):
    return [
        log.append(session_id=f"s{i}", kind="context_msg", role="user", content=text)
        for i, text in enumerate(texts)
    ]


def ranked(log, query, tuning):
    log.search_tuning = tuning
    return [h.seq for h in log.search(query, k=5)]


def test_proximity_puts_query_terms_side_by_side_first(log):
    # The same words in a different order: bm25 ties them and the older turn wins.
    far, near = add(
        log, "walrus one two three four five ferry", "walrus ferry one two three four five"
    )
    add(log, *(f"filler turn {i}" for i in range(5)))
    assert ranked(log, "walrus ferry", PLAIN) == [far, near]
    assert ranked(log, "walrus ferry", replace(PLAIN, proximity_weight=1.0)) == [near, far]
    # Coverage alone cannot tell them apart: both hold both terms.
    assert ranked(log, "walrus ferry", replace(PLAIN, coverage_weight=1.0)) == [far, near]


def test_coverage_lifts_the_turn_holding_more_of_the_query(log):
    one_term, both = add(log, "quokka quokka quokka", "quokka mango lorem ipsum")
    add(log, *(f"mango stand number {i}" for i in range(30)))
    assert ranked(log, "quokka mango", PLAIN)[:2] == [one_term, both]
    assert ranked(log, "quokka mango", replace(PLAIN, coverage_weight=1.0))[:2] == [both, one_term]


def test_features_leave_a_one_term_query_alone(log):
    first, second = add(log, "kiwi", "kiwi kiwi")
    plain = ranked(log, "kiwi", PLAIN)
    both = replace(PLAIN, coverage_weight=1.0, proximity_weight=1.0)
    assert ranked(log, "kiwi", both) == plain
    assert set(plain) == {first, second}


def test_features_match_inflected_forms_as_the_index_does(log):
    far, near = add(
        log, "hiking one two three four five trails", "hiked trail one two three four five"
    )
    add(log, *(f"filler {i}" for i in range(5)))
    assert ranked(log, "hike trails", replace(PLAIN, proximity_weight=1.0))[0] == near
    assert far in ranked(log, "hike trails", PLAIN)


def test_a_short_query_term_is_found_in_longer_words(log):
    far, near = add(log, "go one two three four five home", "going home one two three four five")
    add(log, *(f"filler {i}" for i in range(5)))
    assert ranked(log, "go home", PLAIN)[:2] == [far, near]
    assert ranked(log, "go home", replace(PLAIN, proximity_weight=1.0))[:2] == [near, far]
