"""Search on a live PostgreSQL Event Log as the GIN pending list fills to its limit: each
search's time by how many pages the list held when it ran.

    python bench/pg_pending_sizes.py --json [--events 20000] [--appends 20000] [--queries 3]

``m006_fts_pending_limit`` caps the list at ``pg_schema.FTS_PENDING_KB`` (1 MB, 128 pages),
chosen by ``bench/pg_pending.py`` on the mean over a live log's cycle. This bench asks what
that mean hides: whether a search near the limit costs more than one just after a merge, and
whether the planner's choices turn at some size (its GIN estimate counts every pending page;
at 66 pages under the default limit it had chosen a sequential scan, docs/figures-
performance.md). A database of ``bench/eventlog.py``'s rows (same seed, ``--events`` of
them, the list merged), then ``--appends`` more events in batches of 20 through
``append_many``; after each batch, the list's pages (``pgstatginindex``, from the
``pgstattuple`` extension Debian's server ships) and ``--queries`` searches
(``PgEventLog.search``), the 300 queries in turn. Each search is counted in the quarter of
the limit its list was in; the list empties at each merge, so every quarter sees the log at
every size from ``--events`` on, and the queries in about the same proportions.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from contextlib import ExitStack
from typing import Any

import psycopg
from _common import emit, percentile
from _pg import postgres_database
from eventlog import SEED, make_queries, make_rows, make_vocabulary
from pg_topk import fill_postgres

from scroll_core.store.pg_log import PgEventLog
from scroll_core.store.pg_schema import FTS_PENDING_KB

BATCH = 20
QUARTERS = ("q1", "q2", "q3", "q4")


def run(events: int, appends: int, per_batch: int) -> dict[str, Any]:
    rng = random.Random(SEED)
    vocab = make_vocabulary(rng)
    queries = make_queries(rng, vocab)
    rows = make_rows(events + appends, rng, vocab)
    times: dict[str, list[float]] = {q: [] for q in QUARTERS}
    most = merges = last = asked = 0
    with ExitStack() as stack:
        url = stack.enter_context(postgres_database())
        log = stack.enter_context(PgEventLog(url))
        fill_postgres(log, rows[:events])
        admin = stack.enter_context(psycopg.connect(url, autocommit=True))
        admin.execute("CREATE EXTENSION IF NOT EXISTS pgstattuple")
        page = admin.execute("SELECT current_setting('block_size')::int").fetchone()
        limit_pages = FTS_PENDING_KB * 1024 // int(page[0] if page else 8192)
        sql = "SELECT pending_pages FROM pgstatginindex('events_fts_tsv')"
        for query in queries[:30]:
            log.search(query, k=10)  # warm, untimed
        for at in range(events, events + appends, BATCH):
            log.append_many(rows[at : at + BATCH])
            found = admin.execute(sql).fetchone()
            pages = int(found[0]) if found else 0
            merges += pages < last
            most, last = max(most, pages), pages
            quarter = QUARTERS[min(len(QUARTERS) - 1, pages * len(QUARTERS) // limit_pages)]
            for _ in range(per_batch):
                query = queries[asked % len(queries)]
                asked += 1
                began = time.perf_counter()
                log.search(query, k=10)
                times[quarter].append((time.perf_counter() - began) * 1000)
    figures: dict[str, Any] = {
        "limit_pages": limit_pages,
        "most_pending_pages": most,
        "merges": merges,
        "appended": appends,
    }
    for quarter, values in times.items():
        if not values:
            continue
        figures[f"{quarter}.searches"] = len(values)
        figures[f"{quarter}.search_mean_ms"] = round(statistics.fmean(values), 3)
        figures[f"{quarter}.search_p50_ms"] = round(statistics.median(values), 3)
        figures[f"{quarter}.search_p99_ms"] = round(percentile(values, 99), 3)
    first, full = times[QUARTERS[0]], times[QUARTERS[-1]]
    if first and full:
        figures["full_over_empty_mean"] = round(statistics.fmean(full) / statistics.fmean(first), 3)
    table = {
        "title": f"Search by the pending list's fill, in quarters of its {limit_pages} pages",
        "rows": [q for q in QUARTERS if times[q]],
        "columns": ["searches", "search_mean_ms", "search_p50_ms", "search_p99_ms"],
        "key": "{row}.{column}",
    }
    return {"figures": figures, "readme_tables": [table]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--appends", type=int, default=20_000)
    parser.add_argument("--queries", type=int, default=3, help="searches after each batch")
    args = parser.parse_args()
    if args.events < 1 or args.appends < BATCH or args.queries < 1:
        parser.error(f"--events and --queries must be at least 1, --appends at least {BATCH}")
    emit(run(args.events, args.appends, args.queries), args.json)


if __name__ == "__main__":
    main()
