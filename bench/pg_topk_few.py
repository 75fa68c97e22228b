"""``pg_topk.FEW`` chosen on a dev split of the queries and reported on a test split, one run.

    python bench/pg_topk_few.py --json [--events N] [--few 150,250,500,1000] [--database URL]

The rows and queries of ``bench/eventlog.py`` (same seed) in one PostgreSQL Event Log
(``pg_topk.fill_postgres``). The queries at even positions are the dev split, those at odd
positions the test split. Each query runs ``pg_topk.top_k`` (30 candidates, as search asks)
at every ``--few`` value back to back, three times; its time is the fastest of the three (so
load from elsewhere on a shared machine falls out). Per split and value: p50, p95, p99 and
mean. ``chosen`` is the value with the lowest dev mean; the test split reports it against
the others.
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

from scroll_core.store import SearchTuning
from scroll_core.store.fts_query import query_terms
from scroll_core.store.pg_log import PgEventLog
from scroll_core.store.pg_search import _scope
from scroll_core.store.pg_topk import top_k


def _timed(db: Any, queries: list[str], fews: list[int]) -> dict[int, list[float]]:
    content, headline, name = SearchTuning().rank_weights
    scope, scope_params = _scope(None)
    times: dict[int, list[float]] = {few: [] for few in fews}
    for q in queries:
        params = {"text": " ".join(query_terms(q)), "wa": headline, "wc": name, "wd": content}
        best = dict.fromkeys(fews, float("inf"))
        for _ in range(3):
            for few in fews:
                start = time.perf_counter()
                top_k(db, 30, scope, {**params, **scope_params}, few=few)
                best[few] = min(best[few], (time.perf_counter() - start) * 1000)
        for few in fews:
            times[few].append(best[few])
    return times


def run(n: int, fews: list[int], database: str | None) -> dict[str, Any]:
    rng = random.Random(SEED)
    vocab = make_vocabulary(rng)
    rows = make_rows(n, rng, vocab)
    queries = make_queries(rng, vocab)
    with ExitStack() as stack:
        url = database or stack.enter_context(postgres_database())
        log = stack.enter_context(PgEventLog(url))
        fill_postgres(log, rows)
        db = stack.enter_context(psycopg.connect(url, autocommit=True, options="-c jit=off"))
        for q in queries[:20]:  # warm
            _timed(db, [q], fews)
        splits = {"dev": _timed(db, queries[0::2], fews), "test": _timed(db, queries[1::2], fews)}
    out: dict[str, Any] = {"events": n, "queries": len(queries)}
    for split, times in splits.items():
        for few, ms in times.items():
            out[f"{split}.few_{few}.p50_ms"] = round(statistics.median(ms), 3)
            out[f"{split}.few_{few}.p95_ms"] = round(percentile(ms, 95), 3)
            out[f"{split}.few_{few}.p99_ms"] = round(percentile(ms, 99), 3)
            out[f"{split}.few_{few}.mean_ms"] = round(statistics.mean(ms), 3)
    out["chosen"] = min(fews, key=lambda few: out[f"dev.few_{few}.mean_ms"])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--few", default="150,250,500,1000", help="values to compare")
    parser.add_argument("--database", default=None, help="a database to fill or reuse")
    args = parser.parse_args()
    try:
        fews = [int(v) for v in args.few.split(",")]
    except ValueError:
        parser.error(f"--few must be integers separated by commas, not {args.few!r}")
    if not fews or min(fews) < 0:
        parser.error("--few needs at least one value, none negative")
    emit(run(args.events, fews, args.database), args.json)


if __name__ == "__main__":
    main()
