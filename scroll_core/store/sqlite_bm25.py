"""BM25 on SQLite with the statistics of the searched agents' events alone.

FTS5's own ``bm25()`` counts its statistics over the whole index: the number of documents,
their average length, and how many documents hold each query term. Every agent's events
share that index, so the score of one agent's event moved with what other agents had
written, and an agent could learn from its own scores whether a guessed word was in
another agent's memory. A search that names its agents (every ``ms.search`` does) is ranked
here instead, with FTS5's formula and the statistics of those agents' events only:

- which events hold a query term, in which column and how often: FTS5's own index, read
  through the ``events_fts_instances`` vocabulary table (``fts5vocab``, ``instance``) and
  joined to the events of the agents searched, so another agent's events are never counted;
- the query's tokens as FTS5 makes them (porter-stemmed, diacritics folded): a private
  in-memory FTS5 table with the same tokenizer (``query_tokens``);
- each event's length: FTS5's ``events_fts_docsize``; each agent's document count and total
  length: summed from it and kept per agent, counted forward from the last seq seen
  (``AgentTotals``; an agent's totals change only when that agent's events do).

The score is FTS5's ``bm25()`` step by step (k1 = 1.2, b = 0.75, idf floored at 1e-6,
each term occurrence weighted by its column, the terms summed in query order), so on a log
that holds only the searched agents' events it equals FTS5's to the last digit, and it never
depends on another agent's events at all.
"""

from __future__ import annotations

import functools
import math
import sqlite3
import threading
from collections.abc import Sequence
from typing import Any

from .search import SearchFilters, SearchTuning, TermStats

__all__ = ["AgentTotals", "INSTANCES", "doc_length", "query_tokens", "scoped_bm25"]

# The fts5vocab table of ``events_fts`` (created by ``sqlite_schema.m003_fts_instances``).
INSTANCES = "events_fts_instances"
# FTS5's BM25 constants.
_K1 = 1.2
_B = 0.75
# fts5vocab names a column by its name; the weights are given as (content, headline, name).
_COLUMNS = ("content", "headline", "name")
# Seqs per ``IN (...)`` lookup (SQLite allows 32,766 parameters).
_CHUNK = 10_000


class _Tokenizer:
    """FTS5's own tokenizer, on a private in-memory database: a term is inserted, its
    tokens read back in order, and the row deleted."""

    def __init__(self) -> None:
        self._db = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
        self._db.execute("CREATE VIRTUAL TABLE t USING fts5(x, tokenize='porter unicode61')")
        self._db.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, instance)")
        self._lock = threading.Lock()

    def tokens(self, term: str) -> tuple[str, ...]:
        with self._lock:
            self._db.execute("INSERT INTO t(rowid, x) VALUES (1, ?)", (term,))
            try:
                rows = self._db.execute("SELECT term, offset FROM v ORDER BY offset").fetchall()
            finally:
                self._db.execute("DELETE FROM t")
        return tuple(token for token, _ in rows)


_TOKENIZER = _Tokenizer()


@functools.lru_cache(maxsize=4096)
def query_tokens(term: str) -> tuple[str, ...]:
    """The tokens FTS5 makes of ``term`` (a query term is one word, so one token, but a
    character Python counts as a letter may split it for unicode61)."""
    return _TOKENIZER.tokens(term)


def doc_length(size: bytes | None) -> int:
    """An event's length in tokens: the sum of the varints of its ``events_fts_docsize``
    record (one per column)."""
    total = 0
    if not size:
        return 0
    value = 0
    used = 0
    for byte in size:
        used += 1
        if used == 9:  # a ninth byte gives all its 8 bits
            total += (value << 8) | byte
            value = used = 0
            continue
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            total += value
            value = used = 0
    return total


class AgentTotals:
    """Per agent: how many of its events the full-text index holds and their total length,
    counted up to a seq and carried forward from there (only the agent's own newer events
    are read). Kept per Event Log (``TermStats.backend``)."""

    def __init__(self) -> None:
        self._seen: dict[str, tuple[int, int, int]] = {}
        self._lock = threading.Lock()

    def totals(self, db: Any, agents: Sequence[str]) -> tuple[int, int]:
        """(documents, tokens) over ``agents``' indexed events."""
        docs = tokens = 0
        for agent in sorted(set(agents)):
            with self._lock:
                last, counted, length = self._seen.get(agent, (0, 0, 0))
            rows = db.execute(
                "SELECT e.seq, d.sz FROM events e JOIN events_fts_docsize d ON d.id = e.seq "
                "WHERE e.agent_id = ? AND e.seq > ? AND e.searchable = 1 ORDER BY e.seq",
                (agent, last),
            ).fetchall()
            if rows:
                counted += len(rows)
                length += sum(doc_length(size) for _, size in rows)
                last = rows[-1][0]
                with self._lock:
                    if self._seen.get(agent, (0, 0, 0))[0] < last:
                        self._seen[agent] = (last, counted, length)
            docs += counted
            tokens += length
        return docs, tokens


def agent_totals(stats: TermStats | None) -> AgentTotals:
    """The log's ``AgentTotals`` (a fresh count when there is no cache)."""
    if stats is None:
        return AgentTotals()
    with stats.lock:
        found = stats.backend.get("agent_totals")
        if not isinstance(found, AgentTotals):
            found = stats.backend["agent_totals"] = AgentTotals()
        return found


def _agents(filters: SearchFilters) -> list[str]:
    agents = filters.agent_id
    assert agents is not None
    return [agents] if isinstance(agents, str) else list(agents)


def _occurrences(
    db: Any, tokens: tuple[str, ...], agents: list[str], filters: SearchFilters
) -> dict[int, tuple[list[int], bool]]:
    """Per event of ``agents`` holding the phrase ``tokens``: its occurrences per column
    (content, headline, name), and whether it passes the search's other filters."""
    marks = ", ".join("?" * len(agents))
    keep = f"(1{filters.sql})"
    head = (
        f"SELECT i.doc, i.col, {{what}}, {keep} FROM {INSTANCES} i "
        "JOIN events e ON e.seq = i.doc "
        f"WHERE i.term = ? AND e.agent_id IN ({marks}) AND e.searchable = 1"
    )
    found: dict[int, tuple[list[int], bool]] = {}
    if len(tokens) == 1:
        sql = head.format(what="count(*)") + " GROUP BY i.doc, i.col"
        for doc, col, count, passes in db.execute(
            sql, (*filters.params, tokens[0], *agents)
        ).fetchall():
            entry = found.setdefault(doc, ([0, 0, 0], bool(passes)))
            entry[0][_COLUMNS.index(col)] += count
        return found
    # A phrase: its tokens at consecutive offsets of one column.
    at: list[dict[tuple[int, str], set[int]]] = []
    passing: dict[int, bool] = {}
    for token in tokens:
        places: dict[tuple[int, str], set[int]] = {}
        for doc, col, offset, passes in db.execute(
            head.format(what="i.offset"), (*filters.params, token, *agents)
        ).fetchall():
            places.setdefault((doc, col), set()).add(offset)
            passing[doc] = bool(passes)
        at.append(places)
    for (doc, col), starts in at[0].items():
        hits = sum(
            1
            for start in starts
            if all(start + j in at[j].get((doc, col), ()) for j in range(1, len(tokens)))
        )
        if hits:
            entry = found.setdefault(doc, ([0, 0, 0], passing[doc]))
            entry[0][_COLUMNS.index(col)] += hits
    return found


def scoped_bm25(
    db: Any,
    terms: list[str],
    limit: int,
    filters: SearchFilters,
    tuning: SearchTuning,
    stats: TermStats | None,
) -> dict[int, float]:
    """The best ``limit`` events passing ``filters`` (which name the agents searched) by
    FTS5's BM25 with those agents' statistics, as ``{seq: score}`` (higher is better)."""
    agents = _agents(filters)
    if not agents:
        return {}
    docs, tokens = agent_totals(stats).totals(db, agents)
    if docs == 0:
        return {}
    avgdl = tokens / docs
    weights = tuple(float(w) for w in tuning.rank_weights)
    per_term = [_occurrences(db, query_tokens(t), agents, filters) for t in terms]
    idf = []
    for found in per_term:
        value = math.log((docs - len(found) + 0.5) / (len(found) + 0.5))
        idf.append(value if value > 0.0 else 1e-6)
    matched = sorted({doc for found in per_term for doc, (_, passes) in found.items() if passes})
    if not matched:
        return {}
    lengths: dict[int, bytes] = {}
    for start in range(0, len(matched), _CHUNK):
        chunk = matched[start : start + _CHUNK]
        lengths.update(
            db.execute(
                f"SELECT id, sz FROM events_fts_docsize WHERE id IN ({', '.join('?' * len(chunk))})",
                chunk,
            ).fetchall()
        )
    scores = []
    for doc in matched:
        length = float(doc_length(lengths.get(doc)))
        norm = _K1 * (1 - _B + _B * length / avgdl)
        score = 0.0
        for i, found in enumerate(per_term):
            freq = 0.0
            entry = found.get(doc)
            if entry is not None:
                # Added one occurrence at a time in column order, as FTS5 adds them.
                for column, count in enumerate(entry[0]):
                    for _ in range(count):
                        freq += weights[column] if column < len(weights) else 1.0
            score += idf[i] * ((freq * (_K1 + 1.0)) / (freq + norm))
        scores.append((doc, score))
    scores.sort(key=lambda item: (-item[1], item[0]))
    return dict(scores[:limit])


def scoped_doc_count(db: Any, agents: Sequence[str], stats: TermStats | None) -> int:
    """How many of ``agents``' events the full-text index holds."""
    return agent_totals(stats).totals(db, agents)[0]
