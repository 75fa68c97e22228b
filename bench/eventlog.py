"""Event Log throughput and search latency on both backends, each against its raw database
doing the same work, in one run.

    python bench/eventlog.py --json [--quick] [--events N] [--backend sqlite|postgres|both]

The same generated rows and queries go to each backend (``both``, the default: SQLite, then
PostgreSQL), so the two columns of absolute figures are comparable.

SQLite: our ``EventLog.append_many`` (validation, token counting, dedup, payload routing)
against a bare ``executemany`` of the same rows into the same schema (every migration's
tables, indexes and the triggers that keep the FTS5 index and the session summary), less the
triggers that only refuse writes (append-only and tamper guards): the same stored work.
``raw_table_only_*`` is the baseline this bench used before, the events table, its indexes and
FTS5 alone (``m001_initial``), kept so the figures stay comparable (``*_vs_table_only``).
``raw_json_*`` is the same schema filled by the statement the Event Log itself runs when it
can (``store/json_insert.py``: the batch as one JSON array, ``INSERT ... SELECT FROM
json_each``), bare, JSON encoding included (by orjson, as the Event Log encodes):
``executemany`` pays a statement per row, which this does not, so ``*_vs_json_insert`` is
ours against the database's own best speed.
``ingest_ratio`` is ours as shipped, with token counting on a worker thread for text that is
not ASCII (so it uses a second core when there is one); ``ingest_ratio_single_thread`` is
ours with ``token_thread=False``, token counting on the calling thread, the same work on one
core as the raw side.
Search: the same question-like queries through ``EventLog.search`` against the sanitized
MATCH expression run straight on FTS5 with the same bm25 weights; ``search_agent_*`` is
the same search naming its agent, as every ``ms.search`` does (BM25 then counts its
statistics over that agent's events only; here the one agent holds every event, the
costliest case).

PostgreSQL (``_eventlog_postgres.py``): ``PgEventLog`` against a bare ``COPY`` of the same
rows into the same schema and triggers, and against the same BM25 SQL sent straight, in a
database of ``--postgres-url`` / ``SCROLL_BENCH_POSTGRES_URL`` or a throwaway server.
"""

from __future__ import annotations

import argparse
import itertools
import random
import sqlite3
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson
from _common import emit, median, percentile, time_in_turn

from scroll_core import EventLog
from scroll_core.store import SearchTuning
from scroll_core.store.fts_query import match_expression, query_terms
from scroll_core.store.json_insert import JSON_ROWS_SELECT
from scroll_core.store.sqlite_schema import MIGRATIONS, m001_initial

BATCH = 1000
SEED = 20261129
KINDS = ("context_msg", "model_turn", "tool_result")
STOP = "what when where did the a of in to is was how who which".split()


def make_vocabulary(rng: random.Random, size: int = 6000) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = set()
    while len(words) < size:
        words.add("".join(rng.choice(letters) for _ in range(rng.randint(3, 10))))
    return sorted(words)


def make_rows(
    n: int, rng: random.Random, vocab: list[str], offset: int = 0
) -> list[dict[str, Any]]:
    """``n`` synthetic events; ``offset`` numbers them on from an earlier batch."""
    # Zipf-like word choice so some terms are common and most are rare, as in real logs.
    cum_weights = list(itertools.accumulate(1.0 / (i + 1) for i in range(len(vocab))))
    rows = []
    for i in range(offset, offset + n):
        words = rng.choices(vocab, cum_weights=cum_weights, k=rng.randint(5, 60))
        rows.append(
            {
                "session_id": f"s{i // 5000}",
                "kind": KINDS[i % 3],
                "role": ("user", "assistant", "tool")[i % 3],
                "content": " ".join(words),
                "created_at": f"2026-{1 + (i // 100000) % 12:02d}-01T00:00:{i % 60:02d}Z",
                "dedup_key": f"e{i}",
            }
        )
    return rows


def make_queries(rng: random.Random, vocab: list[str], n: int = 300) -> list[str]:
    queries = []
    for _ in range(n):
        terms = rng.sample(vocab[:3000], rng.randint(1, 4))
        queries.append(" ".join(rng.sample(STOP, 3) + terms) + "?")
    return queries


def raw_schema(migrations: Sequence[Callable[[sqlite3.Connection], None]] = MIGRATIONS) -> str:
    """The Event Log's schema after ``migrations``, less the triggers that only refuse writes
    (their body raises: append-only and tamper guards), which the raw side would never trip:
    the same tables, indexes and FTS5 table, and the triggers that keep them."""
    db = sqlite3.connect(":memory:")
    for migration in migrations:
        migration(db)
    sql = [
        row[0] + ";"
        for row in db.execute(
            "SELECT sql FROM sqlite_master WHERE sql IS NOT NULL AND name != 'sqlite_sequence' "
            "AND name NOT IN (SELECT 'events_fts_' || shadow FROM (SELECT 'data' AS shadow "
            "UNION ALL SELECT 'idx' UNION ALL SELECT 'docsize' UNION ALL SELECT 'config' "
            "UNION ALL SELECT 'content')) "  # FTS5's own tables: it makes them itself
            "AND NOT (type = 'trigger' AND sql LIKE '%RAISE(ABORT%') ORDER BY rowid"
        )
    ]
    db.close()
    return "\n".join(sql)


def open_raw(
    path: Path, migrations: Sequence[Callable[[sqlite3.Connection], None]] = MIGRATIONS
) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.executescript(raw_schema(migrations))
    return db


def raw_tuples(rows: list[dict[str, Any]], log: EventLog) -> list[tuple[Any, ...]]:
    """The very rows the Event Log will store, worked out before the clock starts: the
    baseline pays nothing for validation or token counting."""
    prepared = [log._prepare(i, row) for i, row in enumerate(rows)]
    counts = log.tokens.count_many([r.values[5] for r in prepared])
    return [(*r.values, n) for r, n in zip(prepared, counts, strict=True)]


_RAW_INSERT = (
    "INSERT INTO events (session_id, agent_id, kind, role, name, content, tool_call_id, "
    "tool_input, payload_ref, payload_size, payload_media, headline, metadata, "
    "created_at, dedup_key, searchable, tokens) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def _raw_batch(raw: sqlite3.Connection, batch: list[tuple[Any, ...]]) -> float:
    start = time.perf_counter()
    raw.execute("BEGIN IMMEDIATE")
    raw.executemany(_RAW_INSERT, batch)
    raw.execute("COMMIT")
    return time.perf_counter() - start


_RAW_JSON_INSERT = (
    "INSERT INTO events (session_id, agent_id, kind, role, name, content, tool_call_id, "
    "tool_input, payload_ref, payload_size, payload_media, headline, metadata, "
    f"created_at, dedup_key, searchable, tokens) {JSON_ROWS_SELECT}"
)


def _raw_json_batch(raw: sqlite3.Connection, batch: list[tuple[Any, ...]]) -> float:
    start = time.perf_counter()
    raw.execute("BEGIN IMMEDIATE")
    raw.execute(_RAW_JSON_INSERT, (orjson.dumps(batch).decode(),))
    raw.execute("COMMIT")
    return time.perf_counter() - start


def ingest_both(
    rows: list[dict[str, Any]],
    log: EventLog,
    single: EventLog,
    raw: sqlite3.Connection,
    table_only: sqlite3.Connection,
    raw_json: sqlite3.Connection,
) -> tuple[float, float, float, float, float]:
    """Alternate batches between the five sides so load from elsewhere on the machine falls
    on all alike; return (ours, ours single-thread, raw, raw table-only, raw JSON) seconds."""
    tuples = raw_tuples(rows, log)
    ours_s = single_s = raw_s = table_s = json_s = 0.0
    for i in range(0, len(rows), BATCH):
        raw_s += _raw_batch(raw, tuples[i : i + BATCH])
        mid = time.perf_counter()
        log.append_many(rows[i : i + BATCH])
        after = time.perf_counter()
        single.append_many(rows[i : i + BATCH])
        single_s += time.perf_counter() - after
        ours_s += after - mid
        table_s += _raw_batch(table_only, tuples[i : i + BATCH])
        json_s += _raw_json_batch(raw_json, tuples[i : i + BATCH])
    return ours_s, single_s, raw_s, table_s, json_s


def run_sqlite(rows: list[dict[str, Any]], queries: list[str]) -> dict[str, Any]:
    n = len(rows)
    with tempfile.TemporaryDirectory(prefix="scroll-bench-") as tmp:
        raw_db = open_raw(Path(tmp) / "raw.sqlite3")
        log = EventLog(Path(tmp) / "ours.sqlite3")
        # Token counting on the caller's thread: one core, like raw.
        single = EventLog(Path(tmp) / "single.sqlite3", token_thread=False)
        table_db = open_raw(Path(tmp) / "table_only.sqlite3", [m001_initial])
        json_db = open_raw(Path(tmp) / "raw_json.sqlite3")
        ours_s, single_s, raw_s, table_s, json_s = ingest_both(
            rows, log, single, raw_db, table_db, json_db
        )
        single.close()
        table_db.close()
        json_db.close()
        weights = ", ".join(map(str, SearchTuning().rank_weights))
        raw_sql = (
            f"SELECT rowid, bm25(events_fts, {weights}) AS r, "
            "snippet(events_fts, 0, '[', ']', '…', 16) FROM events_fts "
            "WHERE events_fts MATCH ? ORDER BY r, rowid LIMIT 10"
        )
        began = time.perf_counter()
        log.search("warm", k=10, agent_id="main")  # the agent's totals, counted once
        totals_ms = (time.perf_counter() - began) * 1000
        ours_ms, raw_ms, agent_ms = time_in_turn(
            (
                lambda q: log.search(q, k=10),
                lambda q: raw_db.execute(raw_sql, (match_expression(query_terms(q)),)).fetchall(),
                lambda q: log.search(q, k=10, agent_id="main"),
            ),
            queries,
        ).wall
        log.close()
        raw_db.close()
    ours_rate = n / ours_s
    raw_rate = n / raw_s
    return {
        "events": n,
        "ingest_events_per_s": round(ours_rate),
        "raw_events_per_s": round(raw_rate),
        "ingest_ratio": round(ours_rate / raw_rate, 3),
        "ingest_single_thread_events_per_s": round(n / single_s),
        "ingest_ratio_single_thread": round(n / single_s / raw_rate, 3),
        "raw_table_only_events_per_s": round(n / table_s),
        "ingest_ratio_vs_table_only": round(table_s / ours_s, 3),
        "ingest_ratio_single_thread_vs_table_only": round(table_s / single_s, 3),
        "raw_json_events_per_s": round(n / json_s),
        "ingest_ratio_vs_json_insert": round(json_s / ours_s, 3),
        "ingest_ratio_single_thread_vs_json_insert": round(json_s / single_s, 3),
        "search_queries": len(queries),
        "search_p50_ms": round(median(ours_ms), 3),
        "search_p99_ms": round(percentile(ours_ms, 99), 3),
        "raw_search_p50_ms": round(median(raw_ms), 3),
        "raw_search_p99_ms": round(percentile(raw_ms, 99), 3),
        "search_overhead_ratio": round(median(ours_ms) / median(raw_ms), 3),
        "search_agent_p50_ms": round(median(agent_ms), 3),
        "search_agent_p99_ms": round(percentile(agent_ms, 99), 3),
        "search_agent_first_ms": round(totals_ms, 3),
    }


# The README's table: one row per measure, one column per backend.
MEASURES = (
    "events",
    "ingest_events_per_s",
    "raw_events_per_s",
    "ingest_ratio",
    "ingest_single_thread_events_per_s",
    "ingest_ratio_single_thread",
    "raw_table_only_events_per_s",
    "ingest_ratio_vs_table_only",
    "ingest_ratio_single_thread_vs_table_only",
    "raw_json_events_per_s",
    "ingest_ratio_vs_json_insert",
    "ingest_ratio_single_thread_vs_json_insert",
    "search_p50_ms",
    "raw_search_p50_ms",
    "search_overhead_ratio",
    "search_p99_ms",
    "raw_search_p99_ms",
    "search_agent_p50_ms",
    "search_agent_p99_ms",
    "native_ts_rank_p50_ms",
    "native_ts_rank_p99_ms",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quick", action="store_true", help="20,000 events instead of 1,000,000")
    parser.add_argument("--events", type=int, help="number of events (overrides --quick)")
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--postgres-url", default=None)
    args = parser.parse_args()
    n = args.events or (20_000 if args.quick else 1_000_000)
    if n < BATCH:
        parser.error(f"--events must be at least {BATCH}")

    rng = random.Random(SEED)
    vocab = make_vocabulary(rng)
    rows = make_rows(n, rng, vocab)
    queries = make_queries(rng, vocab)
    results: dict[str, Any] = {}
    if args.backend in ("sqlite", "both"):
        results["sqlite"] = run_sqlite(rows, queries)
    if args.backend in ("postgres", "both"):
        from _eventlog_postgres import run

        results["postgres"] = run(rows, queries, BATCH, args.postgres_url)
    figures = {
        f"{backend}.{key}": value
        for backend, figures in results.items()
        for key, value in figures.items()
    }
    table = {
        "title": "Event Log, each backend against its raw database in the same run",
        "rows": [m for m in MEASURES if any(f"{b}.{m}" in figures for b in results)],
        "columns": list(results),
        "key": "{column}.{row}",
    }
    emit({"figures": figures, "readme_tables": [table]}, args.json)


if __name__ == "__main__":
    main()
