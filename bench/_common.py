"""Helpers shared by the benchmark scripts: timing summaries and JSON output.

With ``--json`` every bench prints one object of the same shape, which ``make bench`` writes
to ``bench/results/<name>.json`` and ``bench/readme_tables.py`` turns into the README's
tables:

- ``figures``: flat keys -> numbers (nested numeric dicts are flattened with ``.``);
- ``details``: everything else the bench reported (counts by action, reasons, lists);
- ``machine``: cores, Python, platform and the UTC date of the run;
- ``command``: the command line that produced it; ``quick``: whether it was a short run.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"

if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of process ``pid`` (all its threads) so far, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Timings(NamedTuple):
    """Milliseconds per side, in the order the sides were given: wall clock, and the
    calling thread's CPU time; with ``keep``, what each side returned, per query."""

    wall: list[list[float]]
    cpu: list[list[float]]
    results: list[list[Any]] | None = None


def balanced_orders(sides: int) -> list[tuple[int, ...]]:
    """Orders of ``sides`` sides in which each side runs right after each other side equally
    often, and in each place equally often (Williams' design for crossover trials): ``sides``
    orders when even, twice that when odd. Every permutation would do too, but there are
    120 of them for 5 sides and 5,040 for 7, more than a run has queries, and taken in turn
    they keep one side first for hundreds of queries."""
    if sides < 1:
        raise ValueError("no sides to time")
    first = [0]
    low, high = 1, sides - 1
    while len(first) < sides:
        first.append(low)
        low += 1
        if len(first) < sides:
            first.append(high)
            high -= 1
    orders = [tuple((side + shift) % sides for side in first) for shift in range(sides)]
    if sides % 2:
        orders += [order[::-1] for order in orders]
    return orders


def time_in_turn(
    sides: Sequence[Callable[[str], Any]],
    queries: list[str],
    warm: int = 20,
    *,
    keep: bool = False,
) -> Timings:
    """Each query on every side back to back, so load from elsewhere on the machine falls
    on all alike. The sides' order changes query by query (``balanced_orders``): a side's
    time depends on which side ran just before it (a search right after another on the same
    file or server finds its pages warmer), and a fixed order favours whichever side always
    follows (at 20,000 events ``eventlog.py``'s SQLite ratio was 1.46-1.52 with ours first
    every time, 1.41-1.47 in turn, three runs each). The first ``warm`` queries run once on
    every side first, untimed. ``keep`` keeps what each side returned for each query."""
    for q in queries[:warm]:
        for run in sides:
            run(q)
    orders = balanced_orders(len(sides))
    wall: list[list[float]] = [[] for _ in sides]
    cpu: list[list[float]] = [[] for _ in sides]
    results: list[list[Any]] | None = [[None] * len(queries) for _ in sides] if keep else None
    for number, q in enumerate(queries):
        for side in orders[number % len(orders)]:
            began_wall, began = time.perf_counter(), time.thread_time()
            got = sides[side](q)
            wall[side].append((time.perf_counter() - began_wall) * 1000)
            cpu[side].append((time.thread_time() - began) * 1000)
            if results is not None:
                results[side][number] = got
    return Timings(wall, cpu, results)


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100) by nearest rank on sorted values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1))))
    return ordered[rank]


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def split_figures(result: dict[str, Any]) -> tuple[dict[str, float], dict[str, Any]]:
    """Numbers (flattened through nested dicts that hold only numbers) versus the rest.

    A result that already carries a ``figures`` dict keeps it as is; its other keys are
    details. NaN (a figure with no samples) is not a number JSON can carry, so it goes to
    the details as ``null`` under its key.
    """
    if isinstance(result.get("figures"), dict):
        return dict(result["figures"]), {k: v for k, v in result.items() if k != "figures"}
    figures: dict[str, float] = {}
    details: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> bool:
        if _is_number(value):
            if isinstance(value, float) and math.isnan(value):
                return False
            figures[prefix] = value
            return True
        if isinstance(value, dict) and value and all(isinstance(k, str) for k in value):
            staged = dict(figures)
            if all(walk(f"{prefix}.{k}", v) for k, v in value.items()):
                return True
            figures.clear()
            figures.update(staged)
        return False

    for key, value in result.items():
        if not walk(key, value):
            details[key] = None if isinstance(value, float) and math.isnan(value) else value
    return figures, details


def machine() -> dict[str, Any]:
    # The load average says whether "nothing else running" held while the bench ran.
    return {
        "load_average_1m": round(os.getloadavg()[0], 2),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def command() -> str:
    script = Path(sys.argv[0]).resolve()
    try:
        shown = str(script.relative_to(REPO))
    except ValueError:
        shown = sys.argv[0]
    return shlex.join(["python", shown, *sys.argv[1:]])


def envelope(result: dict[str, Any], *, quick: bool = False) -> dict[str, Any]:
    figures, details = split_figures(result)
    return {
        "figures": figures,
        "details": details,
        "machine": machine(),
        "command": command(),
        "quick": quick,
    }


def emit(result: dict[str, Any], as_json: bool, *, quick: bool | None = None) -> None:
    """Print the result: one JSON envelope with ``--json``, else aligned ``key value`` lines.

    ``quick`` defaults to whether ``--quick`` is on the command line.
    """
    if quick is None:
        quick = "--quick" in sys.argv[1:]
    if as_json:
        print(json.dumps(envelope(result, quick=quick), indent=2, sort_keys=True))
        return
    width = max(len(k) for k in result)
    for key, value in result.items():
        print(f"{key:<{width}}  {value}")


def metric_tables(
    title: str, rows: list[str], columns: list[str], metrics: tuple[str, ...]
) -> list[dict[str, Any]]:
    """One README pivot table per metric over figures ``<column>.<row>.<metric>``
    (``bench/readme_tables.py``); ``title`` is formatted with ``{metric}``."""
    return [
        {
            "title": title.format(metric=metric),
            "rows": list(rows),
            "columns": list(columns),
            "key": f"{{column}}.{{row}}.{metric}",
        }
        for metric in metrics
    ]


def data_and_json(doc: str | None, argv: list[str] | None) -> argparse.Namespace:
    """The two options of a bench over the shared data alone: ``--data`` and ``--json``."""
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    parser.add_argument("--data", type=Path, default=SHARED_DATA)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    return parser.parse_args(argv)
