"""Whether ``pg_topk.top_k`` should have the server find many matches through the GIN index,
chosen on a dev split of the queries and reported on a test split.

    python bench/pg_topk_index.py --json [--events 20000,200000]

A search whose matches are more than ``pg_topk.FEW`` has the server find them through the GIN
index (``SET LOCAL enable_seqscan = off`` for its transaction, ``top_k(by_index=True)``);
left to itself (``by_index=False``, as before 2026-12-05) the planner reads the whole table
and tests every row for a lexeme in a few percent of the events or more. This measures both.

The rows and queries of ``bench/eventlog.py`` (same seed) in one PostgreSQL Event Log per
size (``pg_topk.fill_postgres``, which also analyzes the tables, so the planner has their
statistics). The queries at even positions are the dev split, those at odd positions the
test split. Each query runs ``pg_topk.top_k`` (30 candidates, as search asks) both ways back
to back, three times; its time is the fastest of the three (so load from elsewhere on a
shared machine falls out). Per size, split and way: p50, p99 and mean. ``chosen`` is the way
with the lower dev mean over the sizes together (each size's mean over the planner's,
averaged), reported on the test split as ``chosen_over_planner_*``.
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

WAYS = {"planner": False, "index": True}


def _timed(db: Any, queries: list[str]) -> dict[str, list[float]]:
    content, headline, name = SearchTuning().rank_weights
    scope, scope_params = _scope(None)
    times: dict[str, list[float]] = {way: [] for way in WAYS}
    for q in queries:
        params = {"text": " ".join(query_terms(q)), "wa": headline, "wc": name, "wd": content}
        best = dict.fromkeys(WAYS, float("inf"))
        tops = []
        for _ in range(3):
            for way, by_index in WAYS.items():
                start = time.perf_counter()
                tops.append(top_k(db, 30, scope, {**params, **scope_params}, by_index=by_index))
                best[way] = min(best[way], (time.perf_counter() - start) * 1000)
        if any(top != tops[0] for top in tops):
            raise SystemExit(f"the two ways gave different tops for {q!r}")
        for way in WAYS:
            times[way].append(best[way])
    return times


def run_size(n: int) -> dict[str, Any]:
    rng = random.Random(SEED)
    vocab = make_vocabulary(rng)
    rows = make_rows(n, rng, vocab)
    queries = make_queries(rng, vocab)
    with ExitStack() as stack:
        url = stack.enter_context(postgres_database())
        log = stack.enter_context(PgEventLog(url))
        fill_postgres(log, rows)
        db = stack.enter_context(psycopg.connect(url, autocommit=True, options="-c jit=off"))
        _timed(db, queries[:20])  # warm
        splits = {"dev": _timed(db, queries[0::2]), "test": _timed(db, queries[1::2])}
    out: dict[str, Any] = {}
    for split, times in splits.items():
        for way, ms in times.items():
            key = f"{n}.{split}.{way}"
            out[f"{key}.p50_ms"] = round(statistics.median(ms), 3)
            out[f"{key}.p99_ms"] = round(percentile(ms, 99), 3)
            out[f"{key}.mean_ms"] = round(statistics.mean(ms), 3)
    return out


def run(sizes: list[int]) -> dict[str, Any]:
    out: dict[str, Any] = {"queries_per_split": 150}
    for n in sizes:
        out.update(run_size(n))

    def relative(way: str) -> float:
        return statistics.mean(
            out[f"{n}.dev.{way}.mean_ms"] / out[f"{n}.dev.planner.mean_ms"] for n in sizes
        )

    chosen = min(WAYS, key=relative)
    out["chosen"] = chosen
    for n in sizes:
        for split in ("dev", "test"):
            for stat in ("mean", "p50", "p99"):
                out[f"{n}.{split}.chosen_over_planner_{stat}"] = round(
                    out[f"{n}.{split}.{chosen}.{stat}_ms"] / out[f"{n}.{split}.planner.{stat}_ms"],
                    3,
                )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--events", default="20000,200000", help="sizes, comma-separated")
    args = parser.parse_args()
    try:
        sizes = [int(v) for v in args.events.split(",")]
    except ValueError:
        parser.error(f"--events must be integers separated by commas, not {args.events!r}")
    if not sizes or min(sizes) < 1:
        parser.error("--events needs at least one size, each at least 1")
    emit(run(sizes), args.json)


if __name__ == "__main__":
    main()
