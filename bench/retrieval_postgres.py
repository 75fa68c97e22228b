"""Retrieval on LoCoMo on both Event Log backends side by side, one run.

    python bench/retrieval_postgres.py --json [--postgres-url URL]

Scroll's rows of ``bench/retrieval.py`` (its variants, per conversation and global) built
once on SQLite and once on PostgreSQL from the same importer, scored on the same items:
``<backend>.<row>.<split>.<metric>`` and ``delta.<row>.<split>.<metric>`` = PostgreSQL minus
SQLite. Aim: |delta| <= 0.02 on every row. The plain baselines are the data set's own FTS5
tables, the same whichever backend holds the log, so they are not repeated here.

The same rows on the generated long assistant conversations (``bench/_assistant_sessions.py``,
all 312 questions) as ``assistant_<row>``: LoCoMo's searches read short turns, so they seldom
reach the bounds issue 34 put on long ones (``SearchTuning.long_turn_words``); these do.
"""

from __future__ import annotations

import argparse
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from _common import SHARED_DATA, emit
from _pg import postgres_database
from retrieval import (
    HEADLINE_ROW,
    METRICS,
    Bench,
    score_rows,
    scroll_search,
    scroll_variants,
    summarise,
)

from bench import _other_sets
from scroll_core import EventLog, EventStore, SearchTuning
from scroll_core.store.pg_log import PgEventLog

SPLITS = ("test", "dev", "all")


def scroll_rows(bench: Bench) -> dict[str, dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    plan = {name: (tuning, True) for name, (_, tuning) in scroll_variants().items()}
    plan[f"{HEADLINE_ROW}_global"] = (SearchTuning(), False)
    for name, (tuning, narrow) in plan.items():
        bench.log.search_tuning = tuning
        scored = score_rows(bench.items, scroll_search(bench.log, bench.keys, narrow=narrow))
        rows[name] = summarise(bench.items, scored)
    return rows


def assistant_rows(log: EventStore, workdir: Path) -> dict[str, dict[str, Any]]:
    """Scroll's rows on the generated assistant conversations held in ``log``, all items
    under the split ``all``."""
    built = _other_sets.assistant_set(workdir, log)
    items = [replace(i, split="all") for i in built.items]
    rows: dict[str, dict[str, Any]] = {}
    try:
        for name, (_, tuning) in scroll_variants().items():
            scored = _other_sets.score(items, built.scroll(tuning))
            rows[f"assistant_{name}"] = _other_sets.summarise(items, scored)
    finally:
        built.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=SHARED_DATA / "locomo" / "locomo10.json")
    parser.add_argument("--postgres-url", default=None)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quick", action="store_true", help="accepted for make bench; no-op")
    args = parser.parse_args()
    if not args.data.is_file():
        parser.error(f"LoCoMo not found at {args.data}")
    results: dict[str, dict[str, dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="scroll-retrieval-") as tmp:
        bench = Bench(args.data, Path(tmp))
        try:
            results["sqlite"] = scroll_rows(bench)
        finally:
            bench.close()
        with EventLog(Path(tmp) / "assistant.sqlite3") as log:
            results["sqlite"] |= assistant_rows(log, Path(tmp))
        with postgres_database(args.postgres_url) as url:
            bench = Bench(args.data, Path(tmp), PgEventLog(url))
            try:
                results["postgres"] = scroll_rows(bench)
            finally:
                bench.close()
        with postgres_database(args.postgres_url) as url, PgEventLog(url) as log:
            results["postgres"] |= assistant_rows(log, Path(tmp))
    figures: dict[str, float] = {}
    for name in results["sqlite"]:
        for split in SPLITS if not name.startswith("assistant_") else ("all",):
            for metric in METRICS:
                a = float(results["sqlite"][name][split][metric])
                b = float(results["postgres"][name][split][metric])
                figures[f"sqlite.{name}.{split}.{metric}"] = a
                figures[f"postgres.{name}.{split}.{metric}"] = b
                figures[f"delta.{name}.{split}.{metric}"] = round(b - a, 4)
    figures["max_abs_delta"] = max(abs(v) for k, v in figures.items() if k.startswith("delta."))
    tables = [
        {
            "title": f"{metric}, all items: SQLite, PostgreSQL, difference",
            "rows": list(results["sqlite"]),
            "columns": ["sqlite", "postgres", "delta"],
            "key": f"{{column}}.{{row}}.all.{metric}",
        }
        for metric in ("recall_at_10", "recall_at_5", "recall_at_1", "hit_at_10")
    ]
    emit({"figures": figures, "readme_tables": tables}, args.json)


if __name__ == "__main__":
    main()
