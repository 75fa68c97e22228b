"""SQLite ingest of this checkout against another one (say main's) in one process, each
against the bare insert of ``bench/eventlog.py`` in the same run.

    python bench/eventlog_ab.py --base DIR [--events N] [--json]

``DIR`` holds the other checkout's ``scroll_core`` (a worktree, or
``git archive main scroll_core | tar -x -C DIR``); it is imported under another name
beside this one (every import inside ``scroll_core`` is relative). Each 1,000-event batch
goes to the bare ``executemany`` and then to four logs, the base and this checkout each
shipped and with ``token_thread=False``, in an order that turns by one place each batch
(each log first, second, third and last equally often: the first to read a batch's events
reads them from memory, the others from the cache), so load from elsewhere on the machine
falls on all alike: on a shared machine two bench runs one after the other
can differ by more than the change being measured. Reports each side's
``ingest_ratio`` (wall clock, as ``eventlog.py``) and, for the single-thread sides, the
ratio of the calling thread's CPU time, which other jobs disturb less; each also against
the bare JSON insert (``*_vs_json_insert``, see ``eventlog.py``). ``--parts`` adds,
for the single-thread sides, the calling thread's CPU per event in each part of an append
(validation, token counting, the INSERT, the rest), in microseconds.
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from _common import emit
from eventlog import (
    BATCH,
    SEED,
    _raw_batch,
    _raw_json_batch,
    make_rows,
    make_vocabulary,
    open_raw,
    raw_tuples,
)

import scroll_core


def load_base(directory: Path) -> ModuleType:
    """The ``scroll_core`` under ``directory``, imported as ``scroll_core_base``."""
    init = directory / "scroll_core" / "__init__.py"
    if not init.is_file():
        raise SystemExit(f"--base: no scroll_core package under {directory}")
    spec = importlib.util.spec_from_file_location(
        "scroll_core_base", init, submodule_search_locations=[str(init.parent)]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["scroll_core_base"] = module
    spec.loader.exec_module(module)
    return module


# The parts of a single-thread append timed by ``--parts``: the methods of ``EventLog`` (in
# both checkouts) that validate a chunk, count its tokens and run the INSERT.
PARTS = {"prepare": "_prepare_chunk", "count": "_count", "insert": "_execute_insert"}


def time_parts(log: Any, side: str, cpu: dict[str, float]) -> None:
    """Wrap ``log``'s part methods to add their thread CPU to ``cpu["side.part"]``."""
    for part, method in PARTS.items():
        inner = getattr(log, method)

        def timed(*args: Any, _inner: Any = inner, _key: str = f"{side}.{part}") -> Any:
            began = time.thread_time()
            try:
                return _inner(*args)
            finally:
                cpu[_key] = cpu.get(_key, 0.0) + time.thread_time() - began

        setattr(log, method, timed)


def run(base: ModuleType, n: int, parts: bool = False) -> dict[str, Any]:
    rng = random.Random(SEED)  # the rows ``eventlog.py`` makes
    rows = make_rows(n, rng, make_vocabulary(rng))
    with tempfile.TemporaryDirectory(prefix="scroll-bench-") as tmp:
        folder = Path(tmp)
        raw = open_raw(folder / "raw.sqlite3")
        raw_json = open_raw(folder / "raw_json.sqlite3")
        logs = {
            "base": base.EventLog(folder / "base.sqlite3"),
            "this": scroll_core.EventLog(folder / "this.sqlite3"),
            "base_single_thread": base.EventLog(folder / "base1.sqlite3", token_thread=False),
            "this_single_thread": scroll_core.EventLog(
                folder / "this1.sqlite3", token_thread=False
            ),
        }
        tuples = raw_tuples(rows, logs["this"])
        logs["base"].tokens.count_many([r["content"] for r in rows])  # both counters warm
        wall = dict.fromkeys(["raw", "raw_json", *logs], 0.0)
        cpu = dict(wall)
        part_cpu: dict[str, float] = {}
        if parts:
            for side in ("base_single_thread", "this_single_thread"):
                time_parts(logs[side], side, part_cpu)
        order = list(logs)
        for number, i in enumerate(range(0, n, BATCH)):
            began = time.thread_time()
            wall["raw"] += _raw_batch(raw, tuples[i : i + BATCH])
            cpu["raw"] += time.thread_time() - began
            began = time.thread_time()
            wall["raw_json"] += _raw_json_batch(raw_json, tuples[i : i + BATCH])
            cpu["raw_json"] += time.thread_time() - began
            turn = number % len(order)
            for side in order[turn:] + order[:turn]:
                began_wall, began = time.perf_counter(), time.thread_time()
                logs[side].append_many(rows[i : i + BATCH])
                wall[side] += time.perf_counter() - began_wall
                cpu[side] += time.thread_time() - began
        for log in logs.values():
            log.close()
        raw.close()
        raw_json.close()
    figures: dict[str, Any] = {
        "events": n,
        "raw_events_per_s": round(n / wall["raw"]),
        "raw_json_events_per_s": round(n / wall["raw_json"]),
    }
    for side in logs:
        figures[f"{side}.ingest_ratio"] = round(wall["raw"] / wall[side], 3)
        figures[f"{side}.ingest_ratio_vs_json_insert"] = round(wall["raw_json"] / wall[side], 3)
        if side.endswith("single_thread"):
            figures[f"{side}.cpu_ratio"] = round(cpu["raw"] / cpu[side], 3)
            figures[f"{side}.cpu_ratio_vs_json_insert"] = round(cpu["raw_json"] / cpu[side], 3)
    if parts:
        figures["raw.cpu_us_per_event"] = round(cpu["raw"] / n * 1e6, 2)
        figures["raw_json.cpu_us_per_event"] = round(cpu["raw_json"] / n * 1e6, 2)
        for side in ("base_single_thread", "this_single_thread"):
            figures[f"{side}.cpu_us_per_event"] = round(cpu[side] / n * 1e6, 2)
            timed = 0.0
            for part in PARTS:
                timed += part_cpu.get(f"{side}.{part}", 0.0)
                figures[f"{side}.{part}_us"] = round(
                    part_cpu.get(f"{side}.{part}", 0.0) / n * 1e6, 2
                )
            figures[f"{side}.rest_us"] = round((cpu[side] - timed) / n * 1e6, 2)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, required=True)
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--parts", action="store_true", help="thread CPU per part of an append")
    args = parser.parse_args()
    if args.events < BATCH:
        parser.error(f"--events must be at least {BATCH}")
    emit(run(load_base(args.base), args.events, args.parts), args.json)


if __name__ == "__main__":
    main()
