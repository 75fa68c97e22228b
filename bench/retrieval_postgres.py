"""Retrieval on LoCoMo on both Event Log backends side by side, one run.

    python bench/retrieval_postgres.py --json [--postgres-url URL]

The same as ``python bench/retrieval.py --backend both``, with flat figures for the README:
``<backend>.<row>.<metric>`` for every row of ``retrieval.py`` (``scroll_search`` and each
variant) and ``delta.<row>.<metric>`` = PostgreSQL minus SQLite. Aim: |delta| ≤ 0.02.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from _common import SHARED_DATA, emit
from _pg import postgres_database
from retrieval import difference, headline, measure

from scroll_core import EventLog
from scroll_core.pglog import PgEventLog

METRICS = ("recall_at_1", "recall_at_5", "recall_at_10", "hit_at_10")


def rows_of(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {"scroll_search": headline(result), **result["variants"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=SHARED_DATA / "locomo" / "locomo10.json")
    parser.add_argument("--postgres-url", default=None)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if not args.data.is_file():
        parser.error(f"LoCoMo not found at {args.data}")
    with (
        tempfile.TemporaryDirectory(prefix="scroll-retrieval-") as tmp,
        EventLog(Path(tmp) / "eventlog.sqlite3") as log,
    ):
        sqlite = measure(log, args.data)
    with postgres_database(args.postgres_url) as url, PgEventLog(url) as log:
        postgres = measure(log, args.data)
    delta = difference(sqlite, postgres)
    figures: dict[str, float] = {}
    for backend, result in (("sqlite", sqlite), ("postgres", postgres)):
        for row, values in rows_of(result).items():
            for metric in METRICS:
                figures[f"{backend}.{row}.{metric}"] = values[metric]
    for row, values in delta.items():
        for metric in METRICS:
            figures[f"delta.{row}.{metric}"] = values.get(metric, 0.0)
    figures["max_abs_delta"] = max(abs(v) for k, v in figures.items() if k.startswith("delta."))
    rows = list(rows_of(sqlite))
    emit_tables = {
        "readme_tables": [
            {
                "title": f"{metric}: SQLite, PostgreSQL, difference",
                "rows": rows,
                "columns": ["sqlite", "postgres", "delta"],
                "key": f"{{column}}.{{row}}.{metric}",
            }
            for metric in ("recall_at_10", "recall_at_5", "recall_at_1")
        ]
    }
    emit({"figures": figures, **emit_tables}, args.json)


if __name__ == "__main__":
    main()
