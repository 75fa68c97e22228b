"""Issue 15's dialogue and date features of the learned ranker (``RANK_FEATURES`` "asks",
"answers", "on_day", "in_month") and the query date reader behind the last two, the
features on both backends."""

from __future__ import annotations

from dataclasses import replace

import pytest
from search_corpus import add, ranked

from scroll_core import ConfigError, SearchTuning
from scroll_core.store.query_dates import date_mentions, named_dates
from scroll_core.store.search import RANK_FEATURES, SearchFilters, search_features
from scroll_core.store.sqlite_search import SQLITE

AT = {name: i for i, name in enumerate(RANK_FEATURES)}
SHIPPED = SearchTuning()


@pytest.fixture
def log(store):
    # Both backends: SQLite, and PostgreSQL under ``python -m tests.servers``.
    return store


def _features(log, query, tuning=SHIPPED, **filters):
    dialect = SQLITE
    if log.backend == "postgres":
        from scroll_core.store.pg_search import PG_DIALECT

        dialect = PG_DIALECT
    return search_features(
        log._reader(), query, 10, SearchFilters(**filters), tuning, dialect, log.term_stats
    )


def _only(**weights: float) -> SearchTuning:
    """The shipped search ranked by ``own`` plus the named features alone."""
    values = [0.0] * len(RANK_FEATURES)
    values[AT["own"]] = 1.0
    for name, weight in weights.items():
        values[AT[name]] = weight
    return replace(SHIPPED, ranker_weights=tuple(values), speaker_weight=0.0)


@pytest.mark.parametrize(
    ("text", "days", "months"),
    [
        ("what did we do on 13 October 2023?", {"2023-10-13"}, {"2023-10"}),
        ("on the 13th of Oct, 2023", {"2023-10-13"}, {"2023-10"}),
        ("What happened on October 13, 2023", {"2023-10-13"}, {"2023-10"}),
        ("sept. 3rd 2022 and MARCH 2024", {"2022-09-03"}, {"2022-09", "2024-03"}),
        ("the run at 2023-10-13T11:00:00Z", {"2023-10-13"}, {"2023-10"}),
        ("the bug from 2024-03", set(), {"2024-03"}),
        ("in May 2023 we moved", set(), {"2023-05"}),
    ],
)
def test_days_and_months_written_out_in_full_are_read(text, days, months):
    found = named_dates(text)
    assert found.days == days and found.months == months
    assert found


@pytest.mark.parametrize(
    "text",
    [
        "on October 13",  # no year: which one is not the log's to guess
        "last Tuesday",
        "31 February 2023",  # no such day, and its month is not meant either
        "2023-13",
        "release v2.2023-10 shipped",  # a version, not a month
        "port 2023 on host 10",
        "in the 1990s",
        "maybe 2023 will be better",  # "may" the verb is not followed by a year here
    ],
)
def test_vague_impossible_or_versioned_dates_name_nothing(text):
    found = named_dates(text)
    assert not found and not found.days and not found.months


def test_each_mention_says_where_the_date_is_written_in_text_order():
    text = "moved in May 2023, signed on 13 October 2023 and 2023-02-31, shipped 2023-11-02"
    found = date_mentions(text)
    assert [(text[m.start : m.end], m.month, m.day) for m in found] == [
        ("May 2023", "2023-05", None),
        ("13 October 2023", "2023-10", "2023-10-13"),
        ("2023-11-02", "2023-11", "2023-11-02"),
    ]  # the impossible 2023-02-31 is no mention, nor is its month
    assert date_mentions("nothing dated here") == []


def test_a_question_turn_asks_and_the_reply_after_it_answers(log):
    asked, reply, statement, quoted = add(
        log,
        "Which team did you sign with this season?",
        "The Minnesota Wolves, I start next week.",
        "I signed the lease for the new flat.",
        'She asked me "did you sign it?" ',
        session="s",
    )
    features = _features(log, "sign team season", session_id="s")
    assert features[asked][AT["asks"]] == 1.0
    assert features[quoted][AT["asks"]] == 1.0  # closing quote and space after the mark
    assert features[reply][AT["asks"]] == 0.0 == features[statement][AT["asks"]]
    # The reply holds no query term; it answers a matching question, by that one's share.
    assert features[reply][AT["own"]] == 0.0
    assert features[reply][AT["answers"]] == features[asked][AT["own"]] > 0.0
    # A turn after a statement answers nothing.
    assert features[quoted][AT["answers"]] == 0.0


def test_a_question_in_another_session_is_answered_by_nothing_here(log):
    (asked,) = add(log, "Which team did you sign with?", session="a")
    (other,) = add(log, "The Wolves, next week.", session="b")
    assert other == asked + 1
    features = _features(log, "team sign")
    assert features[other][AT["answers"]] == 0.0


def test_answering_ranks_the_reply_above_the_question_that_echoes_the_query(log):
    asked, reply = add(
        log,
        "What position do you play on the new team?",
        "Shooting guard, and the opener is next week.",
        session="s",
    )
    add(log, *(f"note {i} about lunch" for i in range(5)), session="s")
    order = ranked(log, "position team", _only(near_1=0.5))
    assert order.index(asked) < order.index(reply)
    order = ranked(log, "position team", _only(near_1=0.5, asks=-0.5, answers=1.0))
    assert order.index(reply) < order.index(asked)


def test_turns_logged_on_the_day_or_month_the_query_names_are_marked(log):
    (on_day,) = add(log, "the painting with the sunset", session="s", day="2023-10-13")
    (same_month,) = add(log, "a painting of the lake", session="s", day="2023-10-02")
    (other_month,) = add(log, "my painting of a barn", session="s", day="2023-11-13")
    features = _features(log, "Which painting did she show on October 13, 2023?")
    assert [features[s][AT["on_day"]] for s in (on_day, same_month, other_month)] == [1, 0, 0]
    assert [features[s][AT["in_month"]] for s in (on_day, same_month, other_month)] == [1, 1, 0]
    month = _features(log, "paintings from October 2023")
    assert [month[s][AT["on_day"]] for s in (on_day, same_month, other_month)] == [0, 0, 0]
    assert [month[s][AT["in_month"]] for s in (on_day, same_month, other_month)] == [1, 1, 0]
    undated = _features(log, "which painting")
    assert all(v[AT["on_day"]] == 0.0 == v[AT["in_month"]] for v in undated.values())


def test_the_date_features_lift_the_named_day_over_an_equal_match(log):
    (early,) = add(log, "we talked about the painting", session="s", day="2023-10-01")
    (named,) = add(log, "we talked about the painting", session="s", day="2023-10-13")
    query = "what painting on 13 October 2023"
    assert ranked(log, query, _only())[0] == early  # a tie goes to the older turn
    assert ranked(log, query, _only(on_day=1.0))[0] == named


def test_too_many_weights_are_refused_and_odd_dates_search_normally(log):
    seqs = add(log, "alpha beta on 2023-02-30", "gamma 99 Smarch 2023", session="a")
    too_many = len(RANK_FEATURES) + 1
    with pytest.raises(ConfigError, match=f"ranker_weights has {too_many} weights"):
        SearchTuning(ranker_weights=(1.0,) * too_many)
    dated = _only(on_day=1.0, in_month=1.0, asks=-0.5, answers=1.0)
    assert sorted(ranked(log, "alpha gamma 2023-02-30 Smarch 2023", dated)) == seqs
    assert [e.seq for e in log.session_events("a", limit=None)] == seqs
