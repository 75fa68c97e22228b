"""SQLite search of this checkout against another one (say main's) in one process, each
against the bare FTS5 query of ``bench/eventlog.py`` in the same run.

    python bench/search_ab.py --base DIR [--events N] [--json]

``DIR`` holds the other checkout's ``scroll_core`` (as for ``eventlog_ab.py``, whose
``load_base`` imports it under another name). One log is written by this checkout and opened
by both checkouts' ``EventLog`` (the same file, so the same rows and pages), and the bare
FTS5 query of ``eventlog.py`` runs on its raw copy; every query runs on the three sides back
to back, the orders taken in turn (all six: one rotating order let a side follow the other
on the same file two times in three, 2-3% warmer). Reports each side's p50 (wall clock and
the calling thread's CPU time), each search's ``search_overhead_ratio`` against the raw p50
of the same run, and ``this_over_base`` (per query, this side's time over the base side's,
the median); this checkout against itself gives 1.00.
Both checkouts must give the same hits for every query, or the run stops. Then a second
pass splits this checkout's search into its parts (``phase.*``, p50 ms over the queries
that match something; ``phase.raw_p50_ms`` over all): FTS5's top candidates, the read of
the candidates and the turns beside them, the linear ranker, and the rest (``search`` less
those three), each part timed by wrapping this checkout's own function for that pass only,
so the A/B figures above carry no wrapper.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from _common import emit, time_in_turn
from eventlog import (
    BATCH,
    SEED,
    _raw_batch,
    make_queries,
    make_rows,
    make_vocabulary,
    open_raw,
    raw_tuples,
)
from eventlog_ab import load_base

import scroll_core
from scroll_core.store import SearchTuning
from scroll_core.store.fts_query import match_expression, query_terms


def run(base: ModuleType, n: int) -> dict[str, Any]:
    rng = random.Random(SEED)  # the rows and queries ``eventlog.py`` makes
    vocab = make_vocabulary(rng)
    rows = make_rows(n, rng, vocab)
    queries = make_queries(rng, vocab)
    weights = ", ".join(map(str, SearchTuning().rank_weights))
    raw_sql = (
        f"SELECT rowid, bm25(events_fts, {weights}) AS r, "
        "snippet(events_fts, 0, '[', ']', '…', 16) FROM events_fts "
        "WHERE events_fts MATCH ? ORDER BY r, rowid LIMIT 10"
    )
    with tempfile.TemporaryDirectory(prefix="scroll-bench-") as tmp:
        folder = Path(tmp)
        raw = open_raw(folder / "raw.sqlite3")
        this = scroll_core.EventLog(folder / "log.sqlite3")
        tuples = raw_tuples(rows, this)
        for i in range(0, n, BATCH):
            _raw_batch(raw, tuples[i : i + BATCH])
            this.append_many(rows[i : i + BATCH])
        other = base.EventLog(folder / "log.sqlite3")
        sides: dict[str, Any] = {
            "base": lambda q: other.search(q, k=10),
            "this": lambda q: this.search(q, k=10),
            "raw": lambda q: raw.execute(raw_sql, (match_expression(query_terms(q)),)).fetchall(),
        }
        for q in queries:
            got, want = sides["this"](q), sides["base"](q)
            if [(h.seq, repr(h.score), h.snippet) for h in got] != [
                (h.seq, repr(h.score), h.snippet) for h in want
            ]:
                raise SystemExit(f"the checkouts rank {q!r} differently")
        # Every order of the three sides in turn, so each follows each other side (and runs
        # first) equally often: a search right after another on the same file runs warmer.
        names = list(sides)
        timings = time_in_turn([sides[name] for name in names], queries, warm=0)
        wall = dict(zip(names, timings.wall, strict=True))
        cpu = dict(zip(names, timings.cpu, strict=True))
        phases = _phases(sides["this"], sides["raw"], queries)
        this.close()
        other.close()
        raw.close()
    figures: dict[str, Any] = {"events": n, "queries": len(queries)}
    figures.update(phases)
    for clock, times in (("wall", wall), ("cpu", cpu)):
        raw_p50 = statistics.median(times["raw"])
        figures[f"raw.{clock}_p50_ms"] = round(raw_p50, 3)
        for side in ("base", "this"):
            p50 = statistics.median(times[side])
            figures[f"{side}.{clock}_p50_ms"] = round(p50, 3)
            figures[f"{side}.{clock}_search_overhead_ratio"] = round(p50 / raw_p50, 3)
        figures[f"this_over_base.{clock}"] = round(
            statistics.median(a / b for a, b in zip(times["this"], times["base"], strict=True)), 3
        )
    return figures


def _phases(search: Any, raw: Any, queries: list[str]) -> dict[str, float]:
    """p50 ms of each part of this checkout's ``search`` (and of the raw query, run after
    each search): its functions wrapped with a clock for this pass, then restored."""
    from scroll_core.store import linear_rank, sqlite_search
    from scroll_core.store import search as search_module

    spent: dict[str, list[float]] = {"candidates": [], "pool": [], "ranker": []}
    wrapped = (
        (sqlite_search, "_ranked_by_fts5", "candidates"),
        (search_module, "_read_pool", "pool"),
        (linear_rank, "linear_scores", "ranker"),
    )
    originals = [getattr(module, name) for module, name, _ in wrapped]

    def clocked(function: Any, part: str) -> Any:
        def timed(*args: Any) -> Any:
            began = time.perf_counter()
            try:
                return function(*args)
            finally:
                spent[part].append((time.perf_counter() - began) * 1000)

        return timed

    totals: list[float] = []
    raw_ms: list[float] = []
    pools: list[float] = []
    for (module, name, part), function in zip(wrapped, originals, strict=True):
        setattr(module, name, clocked(function, part))
    try:
        for q in queries:
            before = {part: len(times) for part, times in spent.items()}
            began = time.perf_counter()
            search(q)
            took = (time.perf_counter() - began) * 1000
            began = time.perf_counter()
            raw(q)
            raw_ms.append((time.perf_counter() - began) * 1000)
            calls = {part: len(times) - before[part] for part, times in spent.items()}
            if calls["candidates"] != 1 or calls["pool"] != 1:
                raise SystemExit("--search phases: the search took another path than timed")
            if calls["ranker"]:  # a query that matched something (else nothing is ranked)
                totals.append(took)
                pools.append(spent["pool"][-1])
            else:
                del spent["candidates"][-1]
    finally:
        for (module, name, _), function in zip(wrapped, originals, strict=True):
            setattr(module, name, function)
    # The pool read's clock holds the candidates' query: the read alone is the difference.
    read = [pool - cand for pool, cand in zip(pools, spent["candidates"], strict=True)]
    rest = [
        total - pool - rank
        for total, pool, rank in zip(totals, pools, spent["ranker"], strict=True)
    ]
    return {
        "phase.search_p50_ms": round(statistics.median(totals), 3),
        "phase.raw_p50_ms": round(statistics.median(raw_ms), 3),
        "phase.candidates_p50_ms": round(statistics.median(spent["candidates"]), 3),
        "phase.pool_read_p50_ms": round(statistics.median(read), 3),
        "phase.ranker_p50_ms": round(statistics.median(spent["ranker"]), 3),
        "phase.rest_p50_ms": round(statistics.median(rest), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, required=True)
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.events < BATCH:
        parser.error(f"--events must be at least {BATCH}")
    emit(run(load_base(args.base), args.events), args.json)


if __name__ == "__main__":
    main()
