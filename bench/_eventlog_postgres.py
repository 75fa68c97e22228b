"""The PostgreSQL side of ``bench/eventlog.py`` (``--backend postgres`` or ``both``): the
Event Log on PostgreSQL against raw PostgreSQL doing the same work, one run.

Ingest: ``PgEventLog.append_many`` (validation, token counting, dedup lookup under the seq
lock, payload routing) against a bare ``COPY`` of the very same rows, token counts worked
out before the clock starts, into a second database with the same schema (each side on a
throwaway server of its own, with the same settings, when no server is given): the same
triggers keep the same full-text index, BM25 statistics and session summary on both sides,
so the difference is what the Event Log adds. (COPY is the fastest way PostgreSQL takes
rows; a multi-row INSERT or ``executemany`` into the same schema is slower.) Batches
alternate between the sides.

Search: ``PgEventLog.search`` (BM25 top-k in SQL over the GIN matches, stopping early
(``pg_topk``), the term features and the neighbour signal, hit rows and snippets) against
the BM25 statement that scores every match sent straight to the server (what search ran
before ``pg_topk``), top 10 with the same weights (what FTS5's ``bm25()`` is to the SQLite
side). ``bench/pg_topk.py`` times the top-k step alone against it and against FTS5.
For reference, PostgreSQL's native ranking on the same GIN index is timed too: the same
terms OR-ed into a tsquery, ranked by ``ts_rank`` (cheaper, and not BM25: no document
frequencies, no length norm).
"""

from __future__ import annotations

import time
from typing import Any

from _common import median, percentile, time_in_turn
from _pg import postgres_database

from scroll_core.store import SearchFilters, SearchTuning
from scroll_core.store.fts_query import query_terms
from scroll_core.store.pg_log import PgEventLog
from scroll_core.store.pg_schema import TS_CONFIG
from scroll_core.store.pg_search import PG_DIALECT, _bm25_sql, _tsquery

_COLUMNS = (
    "session_id, agent_id, kind, role, name, content, tool_call_id, tool_input, payload_ref, "
    "payload_size, payload_media, headline, metadata, created_at, dedup_key, searchable, tokens"
)
RAW_SEARCH = f"""
    SELECT f.seq, ts_rank(f.tsv, q) AS r
    FROM events_fts f, to_tsquery('{TS_CONFIG}', %s) AS q
    WHERE f.tsv @@ q ORDER BY r DESC, f.seq LIMIT 10
"""


def _raw_query(question: str) -> str:
    return " | ".join("'" + t.replace("'", "''") + "'" for t in query_terms(question))


def run(
    rows: list[dict[str, Any]], queries: list[str], batch: int, url: str | None
) -> dict[str, Any]:
    n = len(rows)
    with (
        postgres_database(url) as ours_url,
        postgres_database(url) as raw_url,
        PgEventLog(ours_url) as log,
        PgEventLog(raw_url) as raw_log,  # the same schema and triggers, filled by COPY
    ):
        prepared = [log._prepare(i, row) for i, row in enumerate(rows)]
        counts = log.tokens.count_many([r.values[5] for r in prepared])
        tuples = [(*r.values, c) for r, c in zip(prepared, counts, strict=True)]
        raw = raw_log._writer
        ours_s = raw_s = 0.0
        for i in range(0, n, batch):
            start = time.perf_counter()
            with (
                raw.transaction(),
                raw.cursor().copy(f"COPY events ({_COLUMNS}) FROM STDIN") as copy,
            ):
                for value in tuples[i : i + batch]:
                    copy.write_row(value)
            mid = time.perf_counter()
            log.append_many(rows[i : i + batch])
            ours_s += time.perf_counter() - mid
            raw_s += mid - start
        log.fts_optimize()
        raw_log.fts_optimize()
        reader = raw_log._reader()

        bm25 = _bm25_sql(SearchFilters(), PG_DIALECT)
        content, headline, name = SearchTuning().rank_weights

        def raw_search(q: str) -> Any:
            terms = query_terms(q)
            if not terms:
                return []
            params = {"text": " ".join(terms), "query": _tsquery(terms), "limit": 10}
            params.update(wa=headline, wc=name, wd=content)
            return reader.execute(bm25, params).fetchall()

        def native_search(q: str) -> Any:
            text = _raw_query(q)
            return reader.execute(RAW_SEARCH, (text,)).fetchall() if text else []

        def agent_search(q: str) -> Any:
            return log.search(q, k=10, agent_id="main")

        raw_ms, ours_ms, native_ms, agent_ms = time_in_turn(
            (raw_search, lambda q: log.search(q, k=10), native_search, agent_search), queries
        ).wall
    ours_rate, raw_rate = n / ours_s, n / raw_s
    return {
        "events": n,
        "ingest_events_per_s": round(ours_rate),
        "raw_events_per_s": round(raw_rate),
        "ingest_ratio": round(ours_rate / raw_rate, 3),
        "search_queries": len(queries),
        "search_p50_ms": round(median(ours_ms), 3),
        "search_p99_ms": round(percentile(ours_ms, 99), 3),
        "raw_search_p50_ms": round(median(raw_ms), 3),
        "raw_search_p99_ms": round(percentile(raw_ms, 99), 3),
        "search_overhead_ratio": round(median(ours_ms) / median(raw_ms), 3),
        "native_ts_rank_p50_ms": round(median(native_ms), 3),
        "native_ts_rank_p99_ms": round(percentile(native_ms, 99), 3),
        "search_agent_p50_ms": round(median(agent_ms), 3),
        "search_agent_p99_ms": round(percentile(agent_ms, 99), 3),
    }
