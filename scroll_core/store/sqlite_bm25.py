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
  length: ``events_fts_agent_totals``, kept by the appending transaction
  (``record_totals``), so a search reads one row per agent.

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
from collections.abc import Iterable, Sequence
from typing import Any

from .fts_query import quote_term
from .search import SearchFilters, SearchTuning

__all__ = [
    "INSTANCES",
    "TOTALS",
    "ScopedStats",
    "agent_totals",
    "doc_freqs",
    "doc_length",
    "index_docs",
    "index_sizes",
    "query_tokens",
    "record_totals",
    "scoped_bm25",
    "totals_problems",
]

# The fts5vocab table of ``events_fts``, and each agent's indexed events and tokens counted
# up to a seq (both made by ``sqlite_schema.m003_fts_agent_stats``).
INSTANCES = "events_fts_instances"
TOTALS = "events_fts_agent_totals"
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
    if not size:
        return 0
    if size.isascii():  # every varint one byte (each column under 128 tokens): the bytes
        return sum(size)
    total = 0
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


def index_docs(db: Any) -> int:
    """Documents in the whole FTS5 index: the first varint of its averages record (row 1 of
    ``events_fts_data``, FTS5's own count of rows, kept up to date by every insert)."""
    sizes = index_sizes(db)
    return 0 if sizes is None else sizes[0]


def _first_varint(block: bytes) -> int:
    value = 0
    for i, byte in enumerate(block[:9]):
        if i == 8:  # a ninth byte gives all its 8 bits
            return (value << 8) | byte
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            return value
    return value


def index_sizes(db: Any) -> tuple[int, int] | None:
    """(documents, tokens) of the whole FTS5 index: its averages record (row 1 of
    ``events_fts_data``: the number of rows, then each column's total tokens, as varints;
    every insert adds its event to it). None when there is no such record."""
    row = db.execute("SELECT block FROM events_fts_data WHERE id = 1").fetchone()
    if row is None:
        return None
    block = bytes(row[0] or b"")
    docs = _first_varint(block)
    return docs, doc_length(block) - docs


def _doc_length_sql(db: Any) -> None:
    """``doc_length`` as the SQL function ``scroll_doc_length`` on ``db``, registered once
    (SQLite refuses to replace a function while a statement of the connection runs)."""
    try:
        db.execute("SELECT scroll_doc_length(NULL)").fetchone()
    except sqlite3.OperationalError:
        db.create_function("scroll_doc_length", 1, doc_length, deterministic=True)


def record_totals(
    db: Any,
    agents: Iterable[str],
    *,
    since: int | None = None,
    before: tuple[int, int] | None = None,
    indexed: int | None = None,
) -> None:
    """Bring ``agents``' totals up to the newest seq: run by the appending transaction after
    its inserts (``agents``: those of its rows), so the totals change with the events, all
    or nothing (``TOTALS``; each agent's events read through ``events_agent_seq`` from where
    its count stopped).

    A transaction whose rows are all one agent's may give the index's own sizes before its
    inserts (``index_sizes``, read after seq ``since``) and how many of its rows it indexed:
    when that agent's totals stood at ``since`` and the index grew by exactly ``indexed``
    documents, what the index gained is what the agent gained, and its events are not
    read again (a batch of 1,000: 1,000 docsize records fewer)."""
    top = db.execute("SELECT max(seq) FROM events").fetchone()[0]
    if top is None:
        return
    agents = sorted(set(agents))
    gained = None
    if len(agents) == 1 and before is not None and indexed is not None:
        after = index_sizes(db)
        if after is not None and after[0] - before[0] == indexed:
            gained = (indexed, after[1] - before[1])
    for agent in agents:
        row = db.execute(
            f"SELECT docs, tokens, last_seq FROM {TOTALS} WHERE agent_id = ?", (agent,)
        ).fetchone()
        docs, tokens, last = row if row is not None else (0, 0, 0)
        if gained is not None and last == since:
            more, length = gained
        else:
            more, length = _forward(db, agent, last)
        if row is None:
            db.execute(
                f"INSERT INTO {TOTALS} (agent_id, docs, tokens, last_seq) VALUES (?, ?, ?, ?)",
                (agent, more, length, top),
            )
        else:
            db.execute(
                f"UPDATE {TOTALS} SET docs = ?, tokens = ?, last_seq = ? WHERE agent_id = ?",
                (docs + more, tokens + length, top, agent),
            )


def _forward(db: Any, agent: str, after: int) -> tuple[int, int]:
    """(events, tokens) of ``agent``'s indexed events after seq ``after``: their docsize
    records read and summed here (``doc_lengths``), not by a Python function SQLite calls
    once per row."""
    sizes = db.execute(
        "SELECT d.sz FROM events e JOIN events_fts_docsize d ON d.id = e.seq "
        "WHERE e.agent_id = ? AND e.seq > ? AND e.searchable = 1",
        (agent, after),
    ).fetchall()
    return len(sizes), doc_lengths([size for (size,) in sizes])


def doc_lengths(sizes: list[bytes | None]) -> int:
    """``doc_length`` summed over ``sizes``: when every varint is one byte (every column of
    every event under 128 tokens) the bytes themselves, summed in C."""
    if None not in sizes:
        joined = b"".join(sizes)  # type: ignore[arg-type]  # (no None)
        if joined.isascii():
            return sum(joined)
    return sum(map(doc_length, sizes))


def agent_totals(db: Any, agents: Sequence[str]) -> tuple[int, int]:
    """(documents, tokens) over ``agents``' indexed events: their ``TOTALS`` rows, plus any
    of their events past those rows' ``last_seq`` (appended by a writer that does not keep
    the totals), counted here."""
    docs = tokens = 0
    for agent in sorted(set(agents)):
        row = db.execute(
            f"SELECT docs, tokens, last_seq FROM {TOTALS} WHERE agent_id = ?", (agent,)
        ).fetchone()
        counted, length, last = row if row is not None else (0, 0, 0)
        more, extra = _forward(db, agent, last)
        docs += counted + more
        tokens += length + extra
    return docs, tokens


def totals_problems(db: Any) -> int:
    """How many agents' totals (``agent_totals``) differ from a recount of the index."""
    _doc_length_sql(db)
    recount = {
        agent: (int(docs), int(tokens))
        for agent, docs, tokens in db.execute(
            "SELECT e.agent_id, count(*), coalesce(sum(scroll_doc_length(d.sz)), 0) "
            "FROM events e JOIN events_fts_docsize d ON d.id = e.seq "
            "WHERE e.searchable = 1 GROUP BY e.agent_id"
        ).fetchall()
    }
    kept = {agent for (agent,) in db.execute(f"SELECT agent_id FROM {TOTALS}").fetchall()}
    return sum(
        1
        for agent in recount.keys() | kept
        if agent_totals(db, [agent]) != recount.get(agent, (0, 0))
    )


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


def _weights(tuning: SearchTuning) -> tuple[float, float, float]:
    given = [float(w) for w in tuning.rank_weights][:3]
    content, headline, name = given + [1.0] * (3 - len(given))
    return content, headline, name


def doc_freqs(db: Any, terms: list[str], agents: Sequence[str], whole: bool = False) -> list[int]:
    """Events of ``agents`` holding each term, matched by FTS5 itself. The match leads
    (CROSS JOIN): led by the agent's index, SQLite would run the match once per event.
    ``whole``: the caller knows ``agents`` hold every document of the index, so FTS5's own
    count of the matches is theirs, without looking up each match's agent."""
    if whole:
        sql = "SELECT count(*) FROM events_fts WHERE events_fts MATCH ?"
        return [int(db.execute(sql, (quote_term(t),)).fetchone()[0]) for t in terms]
    sql = (
        "SELECT count(*) FROM events_fts CROSS JOIN events e ON e.seq = events_fts.rowid "
        f"WHERE events_fts MATCH ? AND e.agent_id IN ({', '.join('?' * len(agents))}) "
        "AND e.searchable = 1"
    )
    return [int(db.execute(sql, (quote_term(t), *agents)).fetchone()[0]) for t in terms]


def _idf(docs: int, freqs: list[int]) -> list[float]:
    # Each statement reads its own snapshot: an event the agent appended since its totals
    # were counted may already hold a term, so a count of documents never falls below one.
    docs = max([docs, *freqs])
    out = []
    for n in freqs:
        value = math.log((docs - n + 0.5) / (n + 0.5))
        out.append(value if value > 0.0 else 1e-6)
    return out


def scoped_bm25(
    db: Any,
    terms: list[str],
    limit: int,
    filters: SearchFilters,
    tuning: SearchTuning,
    cache: ScopedStats | None = None,
) -> dict[int, float]:
    """The best ``limit`` events passing ``filters`` (which name the agents searched) by
    FTS5's BM25 with those agents' statistics, as ``{seq: score}`` (higher is better).

    A term's frequency in an event is its occurrences per column times the column's weight
    (content, headline, name), summed in that order; with the shipped weights (powers of
    two) that is exactly the sum FTS5 makes one occurrence at a time."""
    agents = _agents(filters)
    if not agents:
        return {}
    scope = (cache or ScopedStats()).scope(db, agents)
    docs, tokens = scope.docs, scope.tokens
    if docs == 0:
        return {}
    avgdl = tokens / docs
    weights = _weights(tuning)
    stems = [query_tokens(t) for t in terms]
    if all(len(s) == 1 for s in stems):
        idf = _idf(docs, scope.freqs(db, terms, agents))
        return _ranked_in_sql(db, [s[0] for s in stems], idf, avgdl, weights, filters, limit)
    # A term FTS5 splits into a phrase: matched here, offset by offset.
    per_term = [_occurrences(db, s, agents, filters) for s in stems]
    idf = _idf(docs, [len(found) for found in per_term])
    matched = sorted({doc for found in per_term for doc, (_, passes) in found.items() if passes})
    lengths: dict[int, bytes] = {}
    for start in range(0, len(matched), _CHUNK):
        chunk = matched[start : start + _CHUNK]
        lengths.update(
            db.execute(
                "SELECT id, sz FROM events_fts_docsize "
                f"WHERE id IN ({', '.join('?' * len(chunk))})",
                chunk,
            ).fetchall()
        )
    scores = []
    for doc in matched:
        norm = _K1 * (1 - _B + _B * float(doc_length(lengths.get(doc))) / avgdl)
        score = 0.0
        for i, found in enumerate(per_term):
            entry = found.get(doc)
            counts = entry[0] if entry is not None else (0, 0, 0)
            freq = counts[0] * weights[0] + counts[1] * weights[1] + counts[2] * weights[2]
            score += idf[i] * ((freq * (_K1 + 1.0)) / (freq + norm))
        scores.append((doc, score))
    scores.sort(key=lambda item: (-item[1], item[0]))
    return dict(scores[:limit])


# An event's length in SQL when each column's varint is one byte (its record is 3 bytes, the
# common case): the three bytes, read from their hex digits; otherwise ``doc_length``.
_HEX = "'0123456789ABCDEF'"
_BYTE = (
    f"(instr({_HEX}, substr(hex(d.sz), {{hi}}, 1)) * 16 "
    f"+ instr({_HEX}, substr(hex(d.sz), {{lo}}, 1)) - 17)"
)
_LENGTH_SQL = (
    "CASE WHEN length(d.sz) = 3 THEN "
    + " + ".join(_BYTE.format(hi=2 * k + 1, lo=2 * k + 2) for k in range(3))
    + " ELSE scroll_doc_length(d.sz) END"
)


def _ranked_in_sql(
    db: Any,
    stems: list[str],
    idf: list[float],
    avgdl: float,
    weights: tuple[float, float, float],
    filters: SearchFilters,
    limit: int,
) -> dict[int, float]:
    """``scoped_bm25`` for one-token terms, scored and cut to ``limit`` inside SQLite.

    Occurrences are counted per (event, term, column) as integers, so their sums do not
    depend on the order rows arrive in; each term's frequency and BM25 are then one fixed
    expression, summed over the terms in query order as FTS5 sums them. Every number is a
    bound parameter (a decimal literal might not round to the same double)."""
    _doc_length_sql(db)
    params: list[Any] = []
    values = []
    for i, stem in enumerate(stems):
        values.append("(?, ?)")
        params += [i, stem]
    counts = ", ".join(
        f"sum(q.qi = {i} AND i.col = '{col}') AS c{i}_{j}"
        for i in range(len(stems))
        for j, col in enumerate(_COLUMNS)
    )
    params += [_K1, 1 - _B, _B, avgdl, *filters.params]
    terms_sql = []
    for i in range(len(stems)):
        freq = f"(c{i}_0 * ? + c{i}_1 * ? + c{i}_2 * ?)"
        terms_sql.append(f"? * (({freq} * ?) / ({freq} + norm))")
        params += [idf[i], *weights, _K1 + 1.0, *weights]
    params.append(limit)
    sql = f"""
        WITH q(qi, term) AS (VALUES {", ".join(values)}),
        per_doc AS MATERIALIZED (
            SELECT i.doc AS doc, {counts}
            FROM q CROSS JOIN {INSTANCES} AS i
            WHERE i.term = q.term
            GROUP BY i.doc
        ),
        sized AS MATERIALIZED (
            SELECT p.*, ? * (? + ? * ({_LENGTH_SQL}) / ?) AS norm
            FROM per_doc AS p CROSS JOIN events AS e CROSS JOIN events_fts_docsize AS d
            WHERE e.seq = p.doc AND e.searchable = 1{filters.sql} AND d.id = p.doc
        )
        SELECT doc, {" + ".join(terms_sql)} AS score
        FROM sized ORDER BY score DESC, doc LIMIT ?
    """
    return {int(doc): float(score) for doc, score in db.execute(sql, params).fetchall()}


class _Scope:
    """One set of agents' statistics at one state of the log (``ScopedStats``)."""

    def __init__(
        self, owner: ScopedStats, version: int, docs: int, tokens: int, whole: bool
    ) -> None:
        self.owner = owner
        # The log's newest seq when these were counted (``ScopedStats.version``).
        self.version = version
        self.docs = docs
        self.tokens = tokens
        # Whether the agents hold every document of the index (a log of one agent).
        self.whole = whole
        self.counted: dict[str, int] = {}

    def freqs(self, db: Any, terms: list[str], agents: Sequence[str]) -> list[int]:
        """``doc_freqs`` of ``terms``, each counted once at this state of the log."""
        owner = self.owner
        with owner.lock:
            missing = [t for t in dict.fromkeys(terms) if t not in self.counted]
        found = dict(zip(missing, doc_freqs(db, missing, agents, self.whole), strict=True))
        with owner.lock:
            owner.keep(self, found)
            return [self.counted.get(t, found.get(t, 0)) for t in terms]


class ScopedStats:
    """The BM25 statistics of each set of agents searched, kept between the searches of one
    log: their documents and tokens (``agent_totals``), whether they hold the whole index,
    and how many of their documents hold each term counted so far (``doc_freqs``).

    All of it is dropped as soon as the log has grown. Events are append-only, so the newest
    seq (read once per search, one step down the table's B-tree) names the state the counts
    were made at, whichever connection or process appended; a kept count is what a fresh
    count would give (unlike ``TermStats``, which allows a bounded staleness). Only terms
    are kept, at most ``max_terms`` over every set (all dropped when full)."""

    def __init__(self, max_terms: int = 65_536) -> None:
        if max_terms < 1:
            raise ValueError("ScopedStats needs max_terms >= 1")
        self.max_terms = max_terms
        self.lock = threading.Lock()
        self._version = -1
        self._scopes: dict[tuple[str, ...], _Scope] = {}
        self._terms = 0

    @property
    def held(self) -> int:
        """How many term counts are kept."""
        with self.lock:
            return self._terms

    @staticmethod
    def version(db: Any) -> int:
        """The log's state: its newest seq (any append raises it)."""
        return int(db.execute("SELECT coalesce(max(seq), 0) FROM events").fetchone()[0])

    def scope(self, db: Any, agents: Sequence[str]) -> _Scope:
        """``agents``' statistics at the log's current state, counted if not kept."""
        version = self.version(db)
        key = tuple(sorted(set(agents)))
        with self.lock:
            if version != self._version:
                self._version, self._scopes, self._terms = version, {}, 0
            found = self._scopes.get(key)
        if found is not None:
            return found
        docs, tokens = agent_totals(db, key)
        found = _Scope(self, version, docs, tokens, docs > 0 and docs == index_docs(db))
        with self.lock:
            if self._version == version:
                found = self._scopes.setdefault(key, found)
        return found

    def keep(self, scope: _Scope, counted: dict[str, int]) -> None:
        """Keep ``counted`` in ``scope`` (under ``lock``), dropping every count when full."""
        if not any(kept is scope for kept in self._scopes.values()):
            return  # the log grew meanwhile: this scope's counts are no longer kept
        if self._terms + len(counted) > self.max_terms:
            for kept in self._scopes.values():
                kept.counted = {}
            self._terms = 0
        new = {t: n for t, n in counted.items() if t not in scope.counted}
        scope.counted.update(new)
        self._terms += len(new)
