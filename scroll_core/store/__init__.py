"""The Event Log's storage: one interface, a SQLite and a PostgreSQL backend side by side.

    interface.py        EventStore (what everything above storage uses), open_event_store
    records.py          Event, Seqs, SessionSummary: what every backend hands out
    log_common.py       the backends' shared half: validation, payloads, tokens, reads
    sqlite_log.py    |  pg_log.py        the Event Log on each database
    schema_common.py    the append-only refusal's words, the 64-bit integer range
    sqlite_schema.py |  pg_schema.py     numbered migrations, refusing triggers, roles
    scoped_common.py    the tenant boundary of ``ms``: readable agents, reads written once
    sqlite_scoped.py |  pg_scoped.py     how each database shows only those agents' rows
    sqlite_search.py |  pg_search.py     BM25 candidates: FTS5, or BM25 in SQL over tsvectors
    search.py           what both share: the neighbour signal and the learned rankers
    fts_query.py        query text -> safe terms; snippets
    rank_trees.py       the tree ranker (ranker_trees.json) scored in pure Python
    query_dates.py      the dates a query names, for the ranker's date features
    payloads.py         content-addressed payloads behind lazy, sha256-checked handles
    dialect_notes.py    what ``ms.schema()`` says about each backend's SQL
    term_match.py, linear_rank.py, search_bounds.py, ingest_rows.py
                        the search's and the append's loops, compiled with mypyc
                        (``scroll_core.native``: which run compiled, and the switch back)

Only the SQLite side is imported here: the PostgreSQL modules need psycopg, which only
deployments on PostgreSQL install (``open_event_store`` imports ``pg_log`` when asked).
"""

from __future__ import annotations

from .interface import EventStore, is_postgres_url, open_event_store
from .payloads import ArtifactRef, PayloadSource, PayloadStore, ToolResultRef
from .records import (
    KIND_CONTEXT_MSG,
    KIND_MODEL_TURN,
    KIND_TOOL_RESULT,
    Event,
    Seqs,
    SessionSummary,
)
from .search import Hit, SearchFilters, SearchTuning, TermStats
from .sqlite_log import EventLog
from .sqlite_scoped import ScopedReader

__all__ = [
    "KIND_CONTEXT_MSG",
    "KIND_MODEL_TURN",
    "KIND_TOOL_RESULT",
    "ArtifactRef",
    "Event",
    "EventLog",
    "EventStore",
    "Hit",
    "PayloadSource",
    "PayloadStore",
    "ScopedReader",
    "SearchFilters",
    "SearchTuning",
    "Seqs",
    "SessionSummary",
    "TermStats",
    "ToolResultRef",
    "is_postgres_url",
    "open_event_store",
]
