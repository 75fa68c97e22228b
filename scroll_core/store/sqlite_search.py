"""Search on the SQLite Event Log: FTS5 ranks the BM25 candidates (``pg_search`` is
PostgreSQL's).

``SQLITE`` is the ``SearchDialect`` that ``search.run_search`` is given on SQLite: BM25 with
the tuning's column weights over the porter-stemmed ``events_fts`` index, the listing of a
date range, and the term statistics. A search that names its agents is ranked with those
agents' statistics alone (``sqlite_bm25``, its statistics kept between searches by
``ScopedStats`` until the log grows), or by FTS5's own ``bm25()`` when those agents hold the
whole index (the same sums; ``_scoped``); one that names none (the console's, across every
agent) with FTS5's own ``bm25()``, whose statistics are the whole log's.
"""

from __future__ import annotations

import functools
import math
import sqlite3
from dataclasses import replace
from typing import Any

from . import fts_query
from .search import HIT_COLUMNS, Hit, SearchDialect, SearchFilters, SearchTuning, TermStats
from .sqlite_bm25 import ScopedStats, agent_totals, doc_freqs, index_docs, scoped_bm25

__all__ = ["SQLITE"]


def _cached_candidates(
    db: sqlite3.Connection,
    terms: list[str],
    limit: int,
    filters: SearchFilters,
    tuning: SearchTuning,
    stats: TermStats,
) -> dict[int, float]:
    """``_candidates``, a scoped search's statistics kept in the log's ``stats`` between
    searches (``sqlite_bm25.ScopedStats``: dropped whenever the log grows)."""
    if filters.agent_id is None:
        return _ranked_by_fts5(db, terms, limit, filters, tuning)
    with stats.lock:
        if not isinstance(stats.backend, ScopedStats):
            stats.backend = ScopedStats()
        cache = stats.backend
    return _scoped(db, terms, limit, filters, tuning, cache)


def _scoped(
    db: sqlite3.Connection,
    terms: list[str],
    limit: int,
    filters: SearchFilters,
    tuning: SearchTuning,
    cache: ScopedStats,
) -> dict[int, float]:
    """BM25 with the statistics of the agents ``filters`` names. When they hold every
    document of the index (a log of one agent), their statistics are the index's and FTS5's
    own ``bm25()`` computes the very same sums in the same order (``sqlite_bm25``'s
    docstring; ``tests/test_search_agent_scope.py`` checks it to the last digit), in C; only
    with column weights that are powers of two (or 0), for which a column's frequency times
    its weight is exactly FTS5's sum one occurrence at a time. The log must not have grown
    between the check and FTS5's ranking (another agent's event would be counted): it is
    read again after, and a search that raced an append is ranked in ``sqlite_bm25``."""
    agents = [filters.agent_id] if isinstance(filters.agent_id, str) else filters.agent_id
    scope = cache.scope(db, list(agents or ()))
    if scope.whole and _exact_weights(tuning.rank_weights):
        # Every indexed event is the agents': the agent clause would only lead SQLite to
        # walk the agent's events and run the match once per event.
        found = _ranked_by_fts5(db, terms, limit, replace(filters, agent_id=None), tuning)
        if cache.version(db) == scope.version:
            return found
    return scoped_bm25(db, terms, limit, filters, tuning, cache)


def _exact_weights(weights: tuple[float, ...]) -> bool:
    return len(weights) <= 3 and all(
        w == 0.0 or (w > 0.0 and math.frexp(w)[0] == 0.5) for w in weights
    )


def _candidates(
    db: sqlite3.Connection,
    terms: list[str],
    limit: int,
    filters: SearchFilters,
    tuning: SearchTuning,
) -> dict[int, float]:
    if filters.agent_id is not None:
        return _scoped(db, terms, limit, filters, tuning, ScopedStats())
    return _ranked_by_fts5(db, terms, limit, filters, tuning)


def _ranked_by_fts5(
    db: sqlite3.Connection,
    terms: list[str],
    limit: int,
    filters: SearchFilters,
    tuning: SearchTuning,
) -> dict[int, float]:
    """The best ``limit`` matches passing ``filters`` by FTS5's ``bm25()`` (the whole
    index's statistics)."""
    sql = _fts5_sql(tuple(tuning.rank_weights), filters.sql)
    match = fts_query.match_expression(terms)
    return dict(db.execute(sql, (match, *filters.params, limit)).fetchall())


@functools.lru_cache(maxsize=64)
def _fts5_sql(rank_weights: tuple[float, ...], filters: str) -> str:
    """``_ranked_by_fts5``'s statement for these column weights and filter clauses (written
    once per pair, not at every search)."""
    weights = ", ".join(str(float(w)) for w in rank_weights)
    rank = f"bm25(events_fts, {weights})"
    if filters:
        return (
            f"SELECT e.seq, -{rank} AS score FROM events_fts JOIN events e "
            f"ON e.seq = events_fts.rowid WHERE events_fts MATCH ?{filters} "
            "ORDER BY score DESC, e.seq LIMIT ?"
        )
    # Rank inside FTS5 alone: joining every match to the events table first would cost
    # a lookup per match rather than per candidate.
    return (
        f"SELECT rowid, -{rank} AS score FROM events_fts WHERE events_fts MATCH ? "
        "ORDER BY score DESC, rowid LIMIT ?"
    )


def _list_range(db: sqlite3.Connection, k: int, filters: SearchFilters) -> list[Hit]:
    sql = (
        f"SELECT {HIT_COLUMNS}, 0.0, substr(e.content, 1, {fts_query.SNIPPET_CHARS}), "
        f"e.headline FROM events e WHERE e.searchable = 1{filters.sql} ORDER BY e.seq LIMIT ?"
    )
    return [Hit(*row) for row in db.execute(sql, (*filters.params, k))]


def _doc_count(db: sqlite3.Connection, agents: Any) -> int:
    """Documents in the FTS5 index: ``agents``' (``sqlite_bm25.agent_totals``), or with
    None the whole index's, the first varint of its averages record (row 1 of
    ``events_fts_data``, FTS5's own count of rows, kept up to date by every insert)."""
    if agents is not None:
        return agent_totals(db, agents)[0]
    return index_docs(db)


def _doc_freq(db: sqlite3.Connection, terms: list[str], agents: Any) -> list[int]:
    """Documents holding each term (of ``agents``, or with None of the whole log), matched
    by FTS5 itself (so stemmed as a search is)."""
    if agents is not None:
        return doc_freqs(db, terms, list(agents))
    sql = "SELECT count(*) FROM events_fts WHERE events_fts MATCH ?"
    return [int(db.execute(sql, (fts_query.quote_term(t),)).fetchone()[0]) for t in terms]


def _has_json() -> bool:
    """Whether this SQLite has its JSON functions (built in since 3.38, an option before)."""
    db = sqlite3.connect(":memory:")
    try:
        db.execute("SELECT value FROM json_each('[1]')").fetchall()
    except sqlite3.OperationalError:
        return False
    finally:
        db.close()
    return True


SQLITE = SearchDialect(
    "?",
    _candidates,
    _list_range,
    json_lists=_has_json(),
    doc_count=_doc_count,
    doc_freq=_doc_freq,
    cached_candidates=_cached_candidates,
)
