"""Event Log throughput and search latency on PostgreSQL against raw PostgreSQL, one run.

    python bench/eventlog_postgres.py --json [--quick] [--events N] [--postgres-url URL]

(the same as ``python bench/eventlog.py --backend postgres``; same rows and queries).

Ingest: ``PgEventLog.append_many`` (validation, token counting, dedup lookup under the seq
lock, payload routing) against a bare ``COPY`` of the very same rows into a second database
with the same schema, so the same triggers keep the same full-text index, BM25 statistics
and session summary on both sides: the difference is what the Event Log adds.

Search: ``PgEventLog.search`` (BM25 in SQL over the GIN matches, the neighbour signal, hit
rows and snippets) against the same BM25 query sent straight to the server (top 10, the
same weights; what FTS5's ``bm25()`` is to the SQLite bench). For reference, PostgreSQL's
native ranking on the same GIN index is timed too: the same terms OR-ed into a tsquery,
ranked by ``ts_rank`` (cheaper, and not BM25: no document frequencies, no length norm).
"""

from __future__ import annotations

import argparse
import random
import time
from typing import Any

from _common import emit, median, percentile
from _pg import postgres_database

from scroll_core.ftsquery import query_terms
from scroll_core.pglog import PG_DIALECT, PgEventLog, _bm25_sql, _tsquery
from scroll_core.pgschema import TS_CONFIG
from scroll_core.search import SearchFilters, SearchTuning

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

        for q in queries[:20]:
            log.search(q, k=10)
            raw_search(q)
            native_search(q)
        ours_ms: list[float] = []
        raw_ms: list[float] = []
        native_ms: list[float] = []
        sides = (
            (raw_search, raw_ms),
            (lambda q: log.search(q, k=10), ours_ms),
            (native_search, native_ms),
        )
        for q in queries:
            for fn, out in sides:
                start = time.perf_counter()
                fn(q)
                out.append((time.perf_counter() - start) * 1000)
    ours_rate, raw_rate = n / ours_s, n / raw_s
    return {
        "backend": "postgres",
        "events": n,
        "ingest_events_per_s": round(ours_rate),
        "raw_copy_events_per_s": round(raw_rate),
        "ingest_ratio": round(ours_rate / raw_rate, 3),
        "search_queries": len(queries),
        "search_p50_ms": round(median(ours_ms), 3),
        "search_p99_ms": round(percentile(ours_ms, 99), 3),
        "raw_search_p50_ms": round(median(raw_ms), 3),
        "raw_search_p99_ms": round(percentile(raw_ms, 99), 3),
        "search_overhead_ratio": round(median(ours_ms) / median(raw_ms), 3),
        "native_ts_rank_p50_ms": round(median(native_ms), 3),
        "native_ts_rank_p99_ms": round(percentile(native_ms, 99), 3),
    }


def main() -> None:
    from eventlog import BATCH, SEED, make_queries, make_rows, make_vocabulary

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quick", action="store_true", help="20,000 events instead of 1,000,000")
    parser.add_argument("--events", type=int, help="number of events (overrides --quick)")
    parser.add_argument("--postgres-url", default=None)
    args = parser.parse_args()
    n = args.events or (20_000 if args.quick else 1_000_000)
    rng = random.Random(SEED)
    vocab = make_vocabulary(rng)
    rows = make_rows(n, rng, vocab)
    queries = make_queries(rng, vocab)
    emit(run(rows, queries, BATCH, args.postgres_url), args.json)


if __name__ == "__main__":
    main()
