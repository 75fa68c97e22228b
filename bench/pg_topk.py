"""PostgreSQL top-k search candidates side by side on the same rows and queries, one run.

    python bench/pg_topk.py --json [--events N] [--database URL] [--postgres-url URL]

The rows and queries of ``bench/eventlog.py`` (same seed) in one PostgreSQL Event Log
database, filled by ``COPY`` through the Event Log's own triggers, and the same rows in an
SQLite database with the Event Log's FTS5 table (``eventlog.raw_schema``). Each query is
timed on every side back to back (so load from elsewhere falls on all alike), in an order
that changes query by query so each side follows each other equally often
(``_common.time_in_turn``; until 2026-12-05 one fixed order), top 10 with the same column
weights:

- ``every_match``: the BM25 statement that scores every match (``pg_search._bm25_sql``,
  what PostgreSQL search ran before ``pg_topk``);
- ``topk``: ``pg_topk.top_k``, MaxScore over the query's lexemes (what search runs now),
  at 10 and at 30 (the candidates a search asks for);
- ``search``: ``PgEventLog.search(q, k=10)``, end to end;
- ``sqlite_fts5_raw``: FTS5's ``bm25()`` MATCH, straight (the SQLite raw side of
  ``bench/eventlog.py``).

- ``rum`` (with ``--rum``): the RUM index (Debian's ``postgresql-15-rum``) on the same
  tsvectors, rows in its own rank order (``ORDER BY tsv <=> query LIMIT 10``), which stops
  early but is not BM25: ``bm25_top10_recall_in_rum_top{30,300}`` is how much of BM25's top
  10 its first 30 or 300 rows hold. The index is dropped afterwards.

``topk_same_as_every_match`` is the share of queries whose top 10 (seqs, in order) is the
same on both PostgreSQL sides. ``slowest_search`` lists the queries ``search`` took longest
on, with their lexemes' document frequencies (where the p99 comes from). ``--database``
names a database to reuse: filled when empty, used as it is when it already holds the
``--events`` rows (a 1M fill takes many minutes).
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import psycopg
from _common import emit, median, percentile, time_in_turn
from _eventlog_postgres import _COLUMNS
from _pg import postgres_database
from eventlog import SEED, make_queries, make_rows, make_vocabulary, open_raw, raw_tuples

from scroll_core import EventLog
from scroll_core.store import SearchFilters, SearchTuning
from scroll_core.store.fts_query import match_expression, query_terms
from scroll_core.store.pg_log import PgEventLog
from scroll_core.store.pg_search import PG_DIALECT, _bm25_sql, _scope, _tsquery
from scroll_core.store.pg_topk import top_k

BATCH = 10_000


def fill_postgres(log: PgEventLog, rows: list[dict[str, Any]]) -> None:
    """COPY ``rows`` (prepared and counted as the Event Log would) through its triggers."""
    db = log._writer
    have = db.execute("SELECT count(*) FROM events").fetchone()
    if have and have[0] == len(rows):
        return
    if have and have[0]:
        raise SystemExit(f"the database holds {have[0]} events, not {len(rows)}: use another")
    prepared = [log._prepare(i, row) for i, row in enumerate(rows)]
    counts = log.tokens.count_many([r.values[5] for r in prepared])
    tuples = [(*r.values, c) for r, c in zip(prepared, counts, strict=True)]
    for i in range(0, len(tuples), BATCH):
        with db.transaction(), db.cursor().copy(f"COPY events ({_COLUMNS}) FROM STDIN") as copy:
            for value in tuples[i : i + BATCH]:
                copy.write_row(value)
    log.fts_optimize()


def fill_sqlite(path: Path, rows: list[dict[str, Any]]) -> sqlite3.Connection:
    raw = open_raw(path)
    with EventLog(path.with_name("prepare.sqlite3")) as log:
        tuples = raw_tuples(rows, log)
    raw.execute("BEGIN")
    raw.executemany(
        f"INSERT INTO events ({_COLUMNS}) VALUES ({', '.join('?' * 17)})",
        tuples,
    )
    raw.execute("COMMIT")
    return raw


RUM_SQL = (
    "SELECT seq FROM events_fts WHERE tsv @@ %(q)s::tsquery ORDER BY tsv <=> %(q)s::tsquery "
    "LIMIT %(n)s"
)


def add_rum(db: psycopg.Connection[Any]) -> float:
    """Create the RUM index on the full-text table; return the seconds it took."""
    try:
        db.execute("CREATE EXTENSION IF NOT EXISTS rum")
    except psycopg.Error as exc:
        needs = "--rum needs the rum extension (apt-get install postgresql-15-rum)"
        raise SystemExit(f"{needs}: {exc}") from None
    began = time.perf_counter()
    db.execute("CREATE INDEX events_fts_rum ON events_fts USING rum (tsv rum_tsvector_ops)")
    return time.perf_counter() - began


def run(n: int, database: str | None, server: str | None, rum: bool = False) -> dict[str, Any]:
    rng = random.Random(SEED)
    vocab = make_vocabulary(rng)
    rows = make_rows(n, rng, vocab)
    queries = make_queries(rng, vocab)
    content, headline, name = SearchTuning().rank_weights
    weights = {"wa": headline, "wc": name, "wd": content}
    scope, scope_params = _scope(None)
    every_sql = _bm25_sql(SearchFilters(), PG_DIALECT, scope)
    fts_sql = (
        f"SELECT rowid, bm25(events_fts, {content}, {headline}, {name}) AS r FROM events_fts "
        "WHERE events_fts MATCH ? ORDER BY r, rowid LIMIT 10"
    )
    with ExitStack() as stack:
        url = database or stack.enter_context(postgres_database(server))
        log = stack.enter_context(PgEventLog(url))
        began = time.perf_counter()
        fill_postgres(log, rows)
        fill_s = time.perf_counter() - began
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="scroll-topk-")))
        lite = fill_sqlite(tmp / "raw.sqlite3", rows)
        db = stack.enter_context(psycopg.connect(url, autocommit=True, options="-c jit=off"))

        def params(q: str, limit: int) -> dict[str, Any]:
            terms = query_terms(q)
            return {"text": " ".join(terms), "limit": limit, **weights, **scope_params}

        def every(q: str) -> list[int]:
            p = {**params(q, 10), "query": _tsquery(query_terms(q))}
            return [row[0] for row in db.execute(every_sql, p).fetchall()]

        def topk(limit: int) -> Callable[[str], list[int]]:
            def go(q: str) -> list[int]:
                p = params(q, limit)
                found = top_k(db, limit, scope, p)
                return [seq for seq, _ in sorted(found.items(), key=lambda i: (-i[1], i[0]))]

            return go

        def fts(q: str) -> list[int]:
            expr = match_expression(query_terms(q))
            return [row[0] for row in lite.execute(fts_sql, (expr,)).fetchall()]

        def lexemes(q: str) -> str:
            text = " ".join(query_terms(q))
            rows = db.execute(
                "SELECT DISTINCT lexeme FROM unnest(to_tsvector('scroll_english', %s))", (text,)
            ).fetchall()
            return " | ".join("'" + r[0].replace("'", "''") + "'" for r in rows)

        def by_rum(n: int) -> Callable[[str], list[int]]:
            def go(q: str) -> list[int]:
                query = lexemes(q)
                if not query:
                    return []
                return [r[0] for r in db.execute(RUM_SQL, {"q": query, "n": n}).fetchall()]

            return go

        rum_s = add_rum(db) if rum else 0.0
        sides: dict[str, Callable[[str], Any]] = {
            "every_match": every,
            "topk": topk(10),
            "topk_30": topk(30),
            "search": lambda q: log.search(q, k=10),
            "sqlite_fts5_raw": fts,
        }
        if rum:
            sides.update(rum=by_rum(10), rum_300=by_rum(300))
        names = list(sides)
        timed = time_in_turn([sides[name] for name in names], queries, keep=True)
        times = dict(zip(names, timed.wall, strict=True))
        assert timed.results is not None
        got = dict(zip(names, timed.results, strict=True))
        same = sum(top == every for top, every in zip(got["topk"], got["every_match"], strict=True))
        recall: dict[int, list[float]] = {30: [], 300: []}
        if rum:
            for every, ranked in zip(got["every_match"], got["rum_300"], strict=True):
                if every:
                    truth = set(every)
                    for cut in recall:
                        recall[cut].append(len(truth & set(ranked[:cut])) / len(truth))
        slowest = _slowest(db, queries, times["search"])
        lite.close()
        if rum:
            db.execute("DROP INDEX events_fts_rum")
    out: dict[str, Any] = {"events": n, "queries": len(queries), "pg_fill_s": round(fill_s, 1)}
    for name, ms in times.items():
        out[f"{name}_p50_ms"] = round(median(ms), 3)
        out[f"{name}_p99_ms"] = round(percentile(ms, 99), 3)
    out["topk_same_as_every_match"] = round(same / len(queries), 3)
    out["slowest_search"] = slowest
    if rum:
        out["rum_build_s"] = round(rum_s, 1)
        for cut, shares in recall.items():
            out[f"bm25_top10_recall_in_rum_top{cut}"] = round(sum(shares) / len(shares), 3)
    out["topk_p99_over_every_match_p99"] = round(out["topk_p99_ms"] / out["every_match_p99_ms"], 3)
    out["search_p99_over_sqlite_fts5_raw_p99"] = round(
        out["search_p99_ms"] / out["sqlite_fts5_raw_p99_ms"], 3
    )
    return out


def _slowest(
    db: psycopg.Connection[Any], queries: list[str], ms: list[float], n: int = 6
) -> list[dict[str, Any]]:
    """The ``n`` queries ``search`` took longest on, each with its lexemes' document
    frequencies (what decides how many matches ``pg_topk`` scores): where the p99 comes
    from."""
    out = []
    for i in sorted(range(len(queries)), key=lambda i: -ms[i])[:n]:
        text = " ".join(query_terms(queries[i]))
        rows = db.execute(
            "SELECT l.lexeme, coalesce(sum(t.docs), 0)::int FROM (SELECT DISTINCT lexeme "
            "FROM unnest(to_tsvector('scroll_english', %s))) AS l "
            "LEFT JOIN fts_agent_terms t ON t.lexeme = l.lexeme GROUP BY l.lexeme ORDER BY 2",
            (text,),
        ).fetchall()
        out.append({"ms": round(ms[i], 2), "docs": {lex: docs for lex, docs in rows}})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--database", default=None, help="a database to fill or reuse")
    parser.add_argument("--postgres-url", default=None, help="a server to make a database in")
    parser.add_argument("--rum", action="store_true", help="time the RUM index too")
    args = parser.parse_args()
    emit(run(args.events, args.database, args.postgres_url, args.rum), args.json)


if __name__ == "__main__":
    main()
