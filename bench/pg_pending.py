"""The GIN index's pending list on a live PostgreSQL Event Log: search and append cost at each
``gin_pending_list_limit``, chosen on a dev split of the queries, reported on a test split.

    python bench/pg_pending.py --json [--events 20000] [--limits 64,256,1024,4096] [--rounds 3]
        [--bulk 300000]

PostgreSQL's GIN index adds new entries to a pending list (``fastupdate``) and merges them
into the index when the list passes ``gin_pending_list_limit`` (kB; 4096 unless set) or
when (auto)vacuum runs. Every search's bitmap index scan reads the whole list, so between
merges each search pays for what was appended since the last one.

For each limit, a database of ``bench/eventlog.py``'s rows (same seed, ``--events`` of them
copied in through the Event Log's triggers, the pending list then merged, so every limit
starts alike), the index set to that limit; then, as a live log: for each of the 300
queries, 20 more events appended (``append_many``, timed) and the query searched
(``PgEventLog.search``, timed). ``--rounds`` times over, the limits in another order each
round (one fresh database each time). Per limit, over the rounds together: the append cost
per event, the most pending pages left at a round's end, and per split (the queries at even
positions: dev, odd: test) search p50, p99 and mean. Then a bulk load: ``--bulk`` events
appended in batches of 1,000 into one fresh log per limit, the logs taking each batch in
turn (so load from elsewhere falls on all alike), as an importer would; the list's merges
cost more per entry the smaller it is, and more as the index grows. ``chosen``: the limit
with the lowest dev search mean among those whose append cost, live and bulk, is within 10%
of the default's (4096).
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

BATCH = 20
BULK_BATCH = 1000
DEFAULT = 4096
APPEND_SLACK = 1.10


def run_limit(n: int, limit: int) -> tuple[float, int, list[float]]:
    """(seconds appending, pending pages at the end, each search's ms) for one limit."""
    rng = random.Random(SEED)
    vocab = make_vocabulary(rng)
    queries = make_queries(rng, vocab)
    rows = make_rows(n + BATCH * len(queries), rng, vocab)
    with ExitStack() as stack:
        url = stack.enter_context(postgres_database())
        log = stack.enter_context(PgEventLog(url))
        fill_postgres(log, rows[:n])
        admin = stack.enter_context(psycopg.connect(url, autocommit=True))
        admin.execute(f"ALTER INDEX events_fts_tsv SET (gin_pending_list_limit = {limit})")
        admin.execute("SELECT gin_clean_pending_list('events_fts_tsv')")
        admin.execute("CREATE EXTENSION IF NOT EXISTS pgstattuple")
        for q in queries[:20]:  # warm
            log.search(q, k=10)
        append_s = 0.0
        searched: list[float] = []
        for i, q in enumerate(queries):
            batch = rows[n + i * BATCH : n + (i + 1) * BATCH]
            start = time.perf_counter()
            log.append_many(batch)
            append_s += time.perf_counter() - start
            start = time.perf_counter()
            log.search(q, k=10)
            searched.append((time.perf_counter() - start) * 1000)
        pending = admin.execute(
            "SELECT pending_pages FROM pgstatginindex('events_fts_tsv')"
        ).fetchone()
    return append_s, int(pending[0]) if pending else -1, searched


def bulk(n: int, limits: list[int]) -> dict[int, float]:
    """Events per second each limit's log took ``n`` events at, in batches of 1,000."""
    rng = random.Random(SEED + 1)
    rows = make_rows(n, rng, make_vocabulary(rng))
    spent = dict.fromkeys(limits, 0.0)
    with ExitStack() as stack:
        logs = {}
        for limit in limits:
            url = stack.enter_context(postgres_database())
            logs[limit] = stack.enter_context(PgEventLog(url))
            with psycopg.connect(url, autocommit=True) as admin:
                admin.execute(f"ALTER INDEX events_fts_tsv SET (gin_pending_list_limit = {limit})")
        for j, i in enumerate(range(0, n, BULK_BATCH)):
            turn = j % len(limits)
            for limit in limits[turn:] + limits[:turn]:
                start = time.perf_counter()
                logs[limit].append_many(rows[i : i + BULK_BATCH])
                spent[limit] += time.perf_counter() - start
    return {limit: n / spent[limit] for limit in limits}


def readme_tables(limits: list[int]) -> list[dict[str, Any]]:
    """The figures page's table (``bench/readme_tables.py``): one column per limit."""
    return [
        {
            "title": "GIN pending list limit (kB): live search and appends, bulk load",
            "columns": limits,
            "rows": [
                "dev.mean_ms",
                "test.mean_ms",
                "test.p50_ms",
                "test.p99_ms",
                "append_us_per_event",
                "bulk_events_per_s",
                "pending_pages_at_end_max",
            ],
            "key": "limit_{column}.{row}",
        }
    ]


def run(n: int, limits: list[int], rounds: int, bulk_n: int) -> dict[str, Any]:
    if DEFAULT not in limits:
        limits = [*limits, DEFAULT]
    spent = dict.fromkeys(limits, 0.0)
    appended = dict.fromkeys(limits, 0)
    pending = dict.fromkeys(limits, 0)
    # The queries at even positions of each round are the dev split, at odd the test split.
    splits: dict[int, dict[str, list[float]]] = {limit: {"dev": [], "test": []} for limit in limits}
    for r in range(rounds):
        for limit in limits[r % len(limits) :] + limits[: r % len(limits)]:
            append_s, pages, searched = run_limit(n, limit)
            spent[limit] += append_s
            appended[limit] += BATCH * len(searched)
            pending[limit] = max(pending[limit], pages)
            splits[limit]["dev"] += searched[0::2]
            splits[limit]["test"] += searched[1::2]
    out: dict[str, Any] = {
        "events": n,
        "appended_per_round": appended[DEFAULT] // rounds,
        "rounds": rounds,
    }
    for limit in limits:
        out[f"limit_{limit}.append_us_per_event"] = round(spent[limit] / appended[limit] * 1e6, 1)
        out[f"limit_{limit}.pending_pages_at_end_max"] = pending[limit]
        for split, part in splits[limit].items():
            key = f"limit_{limit}.{split}"
            out[f"{key}.p50_ms"] = round(statistics.median(part), 3)
            out[f"{key}.p99_ms"] = round(percentile(part, 99), 3)
            out[f"{key}.mean_ms"] = round(statistics.mean(part), 3)
    rates = bulk(bulk_n, limits)
    out["bulk_events"] = bulk_n
    for limit in limits:
        out[f"limit_{limit}.bulk_events_per_s"] = round(rates[limit])
    out["readme_tables"] = readme_tables(limits)
    cost = out[f"limit_{DEFAULT}.append_us_per_event"] * APPEND_SLACK
    allowed = [
        lim
        for lim in limits
        if out[f"limit_{lim}.append_us_per_event"] <= cost
        and rates[lim] * APPEND_SLACK >= rates[DEFAULT]
    ]
    chosen = min(allowed, key=lambda lim: (out[f"limit_{lim}.dev.mean_ms"], lim))
    out["chosen"] = chosen
    for split in ("dev", "test"):
        for stat in ("mean", "p50", "p99"):
            out[f"{split}.chosen_over_default_{stat}"] = round(
                out[f"limit_{chosen}.{split}.{stat}_ms"]
                / out[f"limit_{DEFAULT}.{split}.{stat}_ms"],
                3,
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--limits", default="64,256,1024,4096", help="kB, comma-separated")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--bulk", type=int, default=300_000, help="events of the bulk load")
    args = parser.parse_args()
    try:
        limits = [int(v) for v in args.limits.split(",")]
    except ValueError:
        parser.error(f"--limits must be integers separated by commas, not {args.limits!r}")
    if not limits or min(limits) < 64:
        parser.error("--limits needs at least one value, each at least 64 (PostgreSQL's least)")
    if args.events < 1 or args.rounds < 1 or args.bulk < 1:
        parser.error("--events, --rounds and --bulk must be at least 1")
    emit(run(args.events, limits, args.rounds, args.bulk), args.json)


if __name__ == "__main__":
    main()
