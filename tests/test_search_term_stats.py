"""Issue 15's whole-log term rarity (``SearchTuning.term_rarity``, ``TermStats``) and the
day-level feature of the learned ranker (``RANK_FEATURES`` "day"), on both backends."""

from __future__ import annotations

from dataclasses import replace

import pytest
from search_corpus import add, ranked

from scroll_core import ConfigError, SearchTuning
from scroll_core.store.search import (
    RANK_FEATURES,
    SearchDialect,
    SearchFilters,
    TermStats,
    search_features,
)
from scroll_core.store.sqlite_search import SQLITE

AT = {name: i for i, name in enumerate(RANK_FEATURES)}
SHIPPED = SearchTuning()
LOG_RARITY = replace(SHIPPED, term_rarity="log")


@pytest.fixture
def log(store):
    # Both backends: SQLite, and PostgreSQL under ``python -m tests.servers``.
    return store


def _dialect(log):
    if log.backend == "postgres":
        from scroll_core.store.pg_search import PG_DIALECT

        return PG_DIALECT
    return SQLITE


def _features(log, query, tuning, **filters):
    """``search_features`` on the log's own backend and statistics cache."""
    return search_features(
        log._reader(), query, 10, SearchFilters(**filters), tuning, _dialect(log), log.term_stats
    )


def _lookup(log, terms, stats=None):
    return (stats or log.term_stats).lookup(log._reader(), terms, _dialect(log))


def _scattered(log):
    """ "beta" is rare in session s but common in the whole log; "alpha" the other way."""
    (beta_turn,) = add(log, "one beta turn here", session="s")
    alpha_turns = add(log, *(f"alpha note number {i}" for i in range(4)), session="s")
    add(log, *(f"beta elsewhere {i}" for i in range(40)), session="t")
    return beta_turn, alpha_turns


def test_whole_log_document_frequency_counts_every_session_and_stems_as_search_does(log):
    add(log, "we went hiking", "she hikes a lot", "a quiet day", session="a")
    add(log, "hiking boots", session="b")
    docs, freqs = _lookup(log, ["hiking", "quiet", "zebra"])
    assert docs == 4
    assert freqs == [3, 1, 0]  # "hikes" and "hiking" share a stem


def test_log_rarity_weighs_a_term_by_the_whole_log_not_by_the_turns_read(log):
    beta_turn, alpha_turns = _scattered(log)
    read = _features(log, "alpha beta", SHIPPED, session_id="s")
    whole = _features(log, "alpha beta", LOG_RARITY, session_id="s")
    # Among session s's turns "beta" is the rare term; over the whole log "alpha" is.
    assert read[beta_turn][AT["rare_coverage"]] > 0.5 > read[alpha_turns[0]][AT["rare_coverage"]]
    assert whole[beta_turn][AT["rare_coverage"]] < 0.5 < whole[alpha_turns[0]][AT["rare_coverage"]]
    # The other features do not depend on where rarity comes from.
    for seq, values in read.items():
        for name in ("own", "coverage", "window_coverage", "day"):
            assert whole[seq][AT[name]] == values[AT[name]], name


def test_the_ranker_ranks_by_log_rarity_when_asked(log):
    beta_turn, alpha_turns = _scattered(log)
    only_rarity = replace(
        LOG_RARITY, ranker_weights=(0.01, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0), speaker_weight=0.0
    )
    assert ranked(log, "alpha beta", only_rarity)[0] in alpha_turns
    log.search_tuning = only_rarity
    assert next(h.seq for h in log.search("alpha beta", 1, session_id="s")) in alpha_turns
    by_read = replace(only_rarity, term_rarity="read")
    log.search_tuning = by_read
    assert next(h.seq for h in log.search("alpha beta", 1, session_id="s")) == beta_turn


def test_cached_counts_are_reused_until_the_log_grows_past_the_slack(log):
    add(log, *(f"kiwi {i}" for i in range(10)), session="a")
    lenient = TermStats(slack=0.5)
    assert _lookup(log, ["kiwi"], lenient) == (10, [10])
    add(log, "kiwi again", "kiwi more", session="a")  # 20% growth: within the slack
    assert _lookup(log, ["kiwi"], lenient) == (12, [10])
    add(log, *(f"kiwi late {i}" for i in range(4)), session="a")  # 60% over the last count
    assert _lookup(log, ["kiwi"], lenient) == (16, [16])
    strict = TermStats(slack=0.0)
    assert _lookup(log, ["kiwi"], strict) == (16, [16])
    add(log, "kiwi once more", session="a")
    assert _lookup(log, ["kiwi"], strict) == (17, [17])


def test_the_cache_is_bounded_by_its_term_count(log):
    add(log, "apple banana cherry damson", session="a")
    small = TermStats(max_terms=2)
    for term in ("apple", "banana", "cherry", "damson"):
        assert _lookup(log, [term], small) == (1, [1])
        assert small.held <= 2


def test_the_day_feature_lifts_turns_of_the_day_where_the_matches_gather(log):
    # Day 1 holds three matching turns and a reply that names no query term; day 2 one
    # weaker match. The reply shares its day's mass; nothing on day 2 reaches it.
    busy = add(
        log,
        "the harbour festival starts friday",
        "the harbour parade has boats",
        "harbour fireworks at night",
        "sounds wonderful, count me in",
        session="s",
        day="2026-01-01",
    )
    (quiet,) = add(log, "a harbour photo", session="s", day="2026-01-09")
    add(log, *(f"filler {i}" for i in range(6)), session="s", day="2026-01-05")
    features = _features(log, "harbour festival", SHIPPED)
    assert features[busy[3]][AT["own"]] == 0.0
    assert features[busy[3]][AT["day"]] == 1.0
    assert 0.0 < features[quiet][AT["day"]] < 1.0
    day_only = replace(SHIPPED, ranker_weights=(0.0,) * 8 + (1.0,), speaker_weight=0.0)
    order = ranked(log, "harbour festival", day_only)
    assert order.index(busy[3]) < order.index(quiet)
    # Without the day weight the reply is not ranked above the weaker match.
    order = ranked(log, "harbour festival", SHIPPED)
    assert quiet in order and (busy[3] not in order or order.index(quiet) < order.index(busy[3]))


def test_bad_settings_are_refused_clearly_and_the_log_keeps_working(log):
    seqs = add(log, "alpha beta gamma", session="a")
    with pytest.raises(ConfigError, match="term_rarity must be one of read, log, got 'global'"):
        SearchTuning(term_rarity="global")
    with pytest.raises(
        ConfigError,
        match=f"has {len(RANK_FEATURES) + 1} weights; the ranker has {len(RANK_FEATURES)} ",
    ):
        SearchTuning(ranker_weights=(1.0,) * (len(RANK_FEATURES) + 1))
    with pytest.raises(ConfigError, match="slack >= 0"):
        TermStats(slack=-0.1)
    no_stats = SearchDialect("?", lambda *a: {}, lambda *a: [])
    with pytest.raises(ConfigError, match="this backend keeps no term statistics"):
        TermStats().lookup(None, ["alpha"], no_stats)
    # The log still searches, under either rarity, and lost nothing.
    assert ranked(log, "alpha gamma", LOG_RARITY) == seqs
    assert ranked(log, "alpha gamma", SHIPPED) == seqs
    assert [e.seq for e in log.session_events("a", limit=None)] == seqs


def test_an_agents_scoped_search_weighs_terms_by_the_whole_log_too(log):
    # ms.search runs on the agent's scoped connection; the statistics it reads are the
    # log's own (like bm25's idf), so both readers rank alike.
    for i in range(3):
        log.append(session_id="a", kind="chat_turn", content=f"alpha note {i}", agent_id="ag")
    log.append(session_id="a", kind="chat_turn", content="one beta turn", agent_id="ag")
    for i in range(20):
        log.append(session_id="o", kind="chat_turn", content=f"beta other {i}", agent_id="other")
    if log.backend == "postgres":
        from scroll_core.store.pg_scoped import PgScopedReader as Reader
    else:
        from scroll_core import ScopedReader as Reader
    log.search_tuning = LOG_RARITY
    reader = Reader(log, ("ag",))
    try:
        scoped = [h.seq for h in reader.search("alpha beta", 4)]
    finally:
        reader.close()
    assert scoped == [h.seq for h in log.search("alpha beta", 4, agent_id="ag")]
    assert len(scoped) == 4
