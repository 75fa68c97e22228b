"""Listing sessions: the maintained summary table against the GROUP BY scan it replaced.

    python bench/sessions.py --json [--quick] [--events N]

One log of N events (200 sessions at 1M) is filled with the same rows twice, batch by batch
alternating: into the Event Log's full schema (with the session_stats trigger and its
guards) and into the schema before it (m001 alone), so the append cost of keeping the table
is measured in the same run. Then ``EventLog.sessions()``, ``session(id)`` and
``count(id)`` are timed against the GROUP BY queries they used to run, alternating calls.
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import emit, median, percentile

from scroll_core import EventLog
from scroll_core.store.sqlite_schema import m001_initial

SEED = 20261130
BATCH = 5000
SESSION_EVENTS = 5000
OLD_SESSIONS = (
    "SELECT session_id, min(agent_id), count(*), coalesce(sum(tokens), 0), min(seq), "
    "max(seq), min(created_at), max(created_at) FROM events "
    "GROUP BY session_id ORDER BY max(seq) DESC"
)
OLD_SESSION = (
    "SELECT session_id, min(agent_id), count(*), coalesce(sum(tokens), 0), min(seq), "
    "max(seq), min(created_at), max(created_at) FROM events WHERE session_id = ? "
    "GROUP BY session_id"
)
OLD_COUNT = "SELECT count(*) FROM events WHERE session_id = ?"
INSERT = (
    "INSERT INTO events (session_id, agent_id, kind, role, content, created_at, tokens) "
    "VALUES (?, 'main', 'context_msg', 'user', ?, ?, ?)"
)


def make_rows(n: int, rng: random.Random) -> list[tuple[Any, ...]]:
    words = ["".join(rng.choices("abcdefghij", k=rng.randint(3, 8))) for _ in range(2000)]
    rows = []
    for i in range(n):
        text = " ".join(rng.choices(words, k=rng.randint(5, 30)))
        stamp = f"2026-{1 + (i // 100000) % 12:02d}-01T00:00:{i % 60:02d}.000000Z"
        rows.append((f"s{i // SESSION_EVENTS}", text, stamp, len(text) // 4))
    return rows


def open_db(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    return db


def fill_both(rows: list[tuple[Any, ...]], new: sqlite3.Connection, old: sqlite3.Connection):
    """Insert the same batches into both schemas, alternating; return seconds (new, old)."""
    new_s = old_s = 0.0
    for i in range(0, len(rows), BATCH):
        batch = rows[i : i + BATCH]
        for db, side in ((old, "old"), (new, "new")):
            start = time.perf_counter()
            db.execute("BEGIN IMMEDIATE")
            db.executemany(INSERT, batch)
            db.execute("COMMIT")
            took = time.perf_counter() - start
            if side == "new":
                new_s += took
            else:
                old_s += took
    return new_s, old_s


def time_pairs(
    pairs: list[tuple[Callable[[], Any], Callable[[], Any]]], rounds: int
) -> tuple[list[float], list[float]]:
    """Time (summary, scan) call pairs back to back so machine load falls on both alike."""
    table_ms: list[float] = []
    scan_ms: list[float] = []
    for ours, scan in pairs:  # warm the page cache for both
        ours()
        scan()
    for _ in range(rounds):
        for ours, scan in pairs:
            for run, out in ((scan, scan_ms), (ours, table_ms)):
                start = time.perf_counter()
                run()
                out.append((time.perf_counter() - start) * 1000)
    return table_ms, scan_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quick", action="store_true", help="100,000 events instead of 1,000,000")
    parser.add_argument("--events", type=int, help="number of events (overrides --quick)")
    parser.add_argument("--rounds", type=int, default=20, help="timed calls of each query")
    args = parser.parse_args()
    n = args.events or (100_000 if args.quick else 1_000_000)
    rows = make_rows(n, random.Random(SEED))

    with tempfile.TemporaryDirectory(prefix="scroll-bench-") as tmp:
        path = Path(tmp) / "ours.sqlite3"
        EventLog(path).close()  # the current schema, every migration applied
        new_db = open_db(path)
        old_db = open_db(Path(tmp) / "before.sqlite3")
        m001_initial(old_db)
        append_new_s, append_old_s = fill_both(rows, new_db, old_db)
        old_db.close()
        new_db.close()

        with EventLog(path) as log:
            reader = log._reader()  # the same read connection the log's own queries use
            middle = f"s{(n // SESSION_EVENTS) // 2}"
            sessions_table, sessions_scan = time_pairs(
                [(log.sessions, lambda: reader.execute(OLD_SESSIONS).fetchall())], args.rounds
            )
            one_table, one_scan = time_pairs(
                [
                    (
                        lambda: log.session(middle),
                        lambda: reader.execute(OLD_SESSION, (middle,)).fetchone(),
                    ),
                    (
                        lambda: log.count(middle),
                        lambda: reader.execute(OLD_COUNT, (middle,)).fetchone(),
                    ),
                ],
                args.rounds,
            )
            # Both sides must agree before any figure means anything.
            scanned = [tuple(r) for r in reader.execute(OLD_SESSIONS)]
            kept = [tuple(vars(s).values()) for s in log.sessions()]
            if scanned != kept:
                raise SystemExit("session_stats disagrees with the GROUP BY scan")
            sessions = len(kept)

    result = {
        "events": n,
        "sessions": sessions,
        "sessions_table_p50_ms": round(median(sessions_table), 3),
        "sessions_table_p99_ms": round(percentile(sessions_table, 99), 3),
        "sessions_scan_p50_ms": round(median(sessions_scan), 3),
        "sessions_scan_p99_ms": round(percentile(sessions_scan, 99), 3),
        "sessions_speedup": round(median(sessions_scan) / median(sessions_table), 1),
        "one_session_table_p50_ms": round(median(one_table), 3),
        "one_session_scan_p50_ms": round(median(one_scan), 3),
        "append_with_table_events_per_s": round(n / append_new_s),
        "append_without_table_events_per_s": round(n / append_old_s),
        "append_ratio": round(append_old_s / append_new_s, 3),
        "rounds": args.rounds,
    }
    emit(result, args.json)


if __name__ == "__main__":
    main()
