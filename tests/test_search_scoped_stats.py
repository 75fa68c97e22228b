"""``sqlite_bm25.ScopedStats``: an agent-scoped search keeps its BM25 statistics between
searches, and every score stays what a fresh count gives: the kept counts are dropped on any
append (by this log object or another connection to the same file), and one set of agents'
counts are never read for another."""

from __future__ import annotations

import pytest

from scroll_core import EventLog
from scroll_core.store.sqlite_bm25 import ScopedStats, doc_freqs

ME, OTHER = "alice", "bob"


def _add(log, agent, texts, session="s"):
    return log.append_many(
        [
            {"session_id": session, "agent_id": agent, "kind": "context_msg", "content": t}
            for t in texts
        ]
    )


def _seen(log, query, agent):
    return [(h.seq, h.score) for h in log.search(query, k=10, agent_id=agent)]


def _fresh(path, query, agent):
    """The same search on a new log object over the same file: nothing kept yet."""
    with EventLog(path) as log:
        return _seen(log, query, agent)


@pytest.fixture
def path(tmp_path):
    path = tmp_path / "eventlog.sqlite3"
    with EventLog(path) as log:
        _add(log, ME, ["apple pie recipe", "pear tart", "apple crumble", "plum jam", "figs"])
        _add(log, OTHER, ["apple apple orchard", "apple cider", "apple sauce"], session="o")
    return path


def test_kept_statistics_are_reused_and_dropped_on_append(path):
    with EventLog(path) as log:
        first = _seen(log, "apple tart", ME)
        kept = log.term_stats.backend
        assert isinstance(kept, ScopedStats) and kept.held == 2  # both terms counted once
        assert _seen(log, "apple tart", ME) == first
        # More of my events hold "apple": its document frequency and my totals change.
        _add(log, ME, ["apple", "apple strudel", "apple tree", "green apple"])
        after = _seen(log, "apple tart", ME)
        assert after == _fresh(path, "apple tart", ME)
        assert dict(after)[1] != dict(first)[1]  # a stale count would have kept the old score


def test_an_append_through_another_connection_drops_them_too(path):
    with EventLog(path) as log, EventLog(path) as writer:
        before = _seen(log, "apple", ME)
        _add(writer, ME, ["apple", "apple", "apple"])
        after = _seen(log, "apple", ME)
        assert after == _fresh(path, "apple", ME)
        assert dict(after)[1] != dict(before)[1]


def test_each_set_of_agents_has_its_own(path):
    with EventLog(path) as log:
        mine = _seen(log, "apple", ME)
        theirs = _seen(log, "apple", OTHER)
        both = _seen(log, "apple", [ME, OTHER])
        assert theirs == _fresh(path, "apple", OTHER)
        assert both == _fresh(path, "apple", [ME, OTHER])
        assert mine == _fresh(path, "apple", ME)
        # "apple" is in 2 of my 5 events and all 3 of bob's: different statistics.
        assert dict(mine)[1] != dict(both)[1]


def test_a_full_cache_is_emptied_not_grown(path):
    stats = ScopedStats(max_terms=2)
    with EventLog(path) as log:
        log.term_stats.backend = stats
        _seen(log, "apple pear", ME)
        assert stats.held == 2
        result = _seen(log, "plum figs", ME)
        assert stats.held == 2  # emptied, then the two new terms kept
        assert result == _fresh(path, "plum figs", ME)
    with pytest.raises(ValueError):
        ScopedStats(max_terms=0)


def test_a_log_of_one_agent_counts_terms_without_the_agent_join(tmp_path):
    with EventLog(tmp_path / "one.sqlite3") as log:
        _add(log, ME, ["apple pie", "apple", "pear", "tart apple apple"])
        db = log._reader()
        terms = ["apple", "pear", "kiwi"]
        assert doc_freqs(db, terms, [ME], whole=True) == doc_freqs(db, terms, [ME]) == [3, 1, 0]
        _seen(log, "apple", ME)
        assert log.term_stats.backend._scopes[(ME,)].whole
        _add(log, OTHER, ["apple"])
        _seen(log, "apple", ME)
        assert not log.term_stats.backend._scopes[(ME,)].whole


def test_a_one_agent_log_is_ranked_by_fts5_until_another_agent_writes(tmp_path):
    """The agents searched hold the whole index: FTS5's own bm25 (the same sums) ranks it.
    Once another agent has an event, the search is ranked on the agent's statistics alone
    again, and ``scoped_bm25``'s SQL gives those scores."""
    from scroll_core.store.search import SearchFilters, SearchTuning
    from scroll_core.store.sqlite_bm25 import scoped_bm25
    from scroll_core.store.sqlite_search import SQLITE

    with EventLog(tmp_path / "one.sqlite3") as log:
        _add(log, ME, ["apple pie", "apple", "pear", "tart apple apple", "plum"])
        db = log._reader()
        tuning, mine = SearchTuning(), SearchFilters(agent_id=ME)
        shortcut = SQLITE.candidates(db, ["apple", "tart"], 10, mine, tuning)
        assert shortcut == SQLITE.candidates(db, ["apple", "tart"], 10, SearchFilters(), tuning)
        assert shortcut == scoped_bm25(db, ["apple", "tart"], 10, mine, tuning)
        _add(log, OTHER, ["apple", "apple cake", "apple"], session="o")
        scoped = SQLITE.candidates(db, ["apple", "tart"], 10, mine, tuning)
        assert scoped == scoped_bm25(db, ["apple", "tart"], 10, mine, tuning)
        assert scoped != SQLITE.candidates(db, ["apple", "tart"], 10, SearchFilters(), tuning)
        # Weights FTS5 would sum differently (0.3 is not a power of two) keep the SQL.
        odd = SearchTuning(rank_weights=(0.3, 2.0, 0.5))
        _add(tmp_log := EventLog(tmp_path / "two.sqlite3"), ME, ["apple pie", "apple"])
        with tmp_log:
            got = SQLITE.candidates(tmp_log._reader(), ["apple"], 10, mine, odd)
            assert got == scoped_bm25(tmp_log._reader(), ["apple"], 10, mine, odd)
