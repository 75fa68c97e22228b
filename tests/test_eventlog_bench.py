"""``bench/eventlog.py`` measures both backends in one run and feeds the README's table."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from readme_tables import render_block  # noqa: E402


def test_one_small_run_reports_both_backends_side_by_side(postgres_server):
    env = {**os.environ, "SCROLL_BENCH_POSTGRES_URL": postgres_server.url}
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "eventlog.py"), "--json", "--events", "2000"],
        capture_output=True, text=True, timeout=600, check=False, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    envelope = json.loads(done.stdout)
    figures = envelope["figures"]
    for backend in ("sqlite", "postgres"):
        assert figures[f"{backend}.events"] == 2000
        for key in ("ingest_ratio", "search_overhead_ratio", "search_p50_ms"):
            assert figures[f"{backend}.{key}"] > 0, key
    assert figures["postgres.native_ts_rank_p50_ms"] > 0
    table = render_block("eventlog", envelope)
    assert "| | sqlite | postgres |" in table
    assert "| ingest_events_per_s |" in table and "| native_ts_rank_p50_ms | – |" in table


def test_a_size_below_one_batch_is_refused():
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "eventlog.py"), "--events", "10"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 2 and "at least 1000" in done.stderr
    with pytest.raises(json.JSONDecodeError):
        json.loads(done.stdout or "not json")


def test_the_raw_side_stores_what_the_event_log_stores_less_only_the_refusals(tmp_path):
    import random

    import eventlog as bench

    from scroll_core import EventLog

    rng = random.Random(5)
    rows = bench.make_rows(1500, rng, bench.make_vocabulary(rng, 300))
    log = EventLog(tmp_path / "ours.sqlite3")
    raw = bench.open_raw(tmp_path / "raw.sqlite3")
    try:
        tuples = bench.raw_tuples(rows, log)
        log.append_many(rows)
        raw.execute("BEGIN IMMEDIATE")
        raw.executemany(bench._RAW_INSERT, tuples)
        raw.execute("COMMIT")
        # The bare JSON insert stores the very rows executemany does.
        raw_json = bench.open_raw(tmp_path / "raw_json.sqlite3")
        bench._raw_json_batch(raw_json, tuples)
        everything = "SELECT * FROM events ORDER BY seq"
        assert raw_json.execute(everything).fetchall() == raw.execute(everything).fetchall()
        raw_json.close()
        ours = log._writer  # the log's own connection, read after its append committed
        tables = "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
        assert [r[0] for r in raw.execute(tables)] == [
            r[0] for r in ours.execute(tables) if r[0] != "_scroll_migrations"
        ]
        # The summary and the index are kept on the raw side by the same triggers.
        summary = "SELECT * FROM session_stats ORDER BY session_id"
        assert raw.execute(summary).fetchall() == ours.execute(summary).fetchall()
        matches = "SELECT count(*) FROM events_fts WHERE events_fts MATCH 'a* OR b*'"
        assert raw.execute(matches).fetchone() == ours.execute(matches).fetchone()
        # What it lacks are the triggers that only refuse, and only those.
        triggers = "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' ORDER BY name"
        kept = dict(raw.execute(triggers).fetchall())
        refusing = {n for n, sql in ours.execute(triggers) if "RAISE(ABORT" in sql}
        assert refusing and not refusing & set(kept)
        assert set(kept) == {n for n, _ in ours.execute(triggers)} - refusing
        # The former baseline is the events table and its index alone.
        table_only = bench.open_raw(tmp_path / "table.sqlite3", [bench.m001_initial])
        assert "session_stats" not in {r[0] for r in table_only.execute(tables)}
        table_only.close()
    finally:
        log.close()
        raw.close()


def test_the_ab_run_compares_two_checkouts_in_one_process(tmp_path):
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "eventlog_ab.py"), "--json", "--events", "2000",
         "--base", str(REPO)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(done.stdout)["figures"]
    assert figures["events"] == 2000
    for side in ("base", "this", "base_single_thread", "this_single_thread"):
        assert figures[f"{side}.ingest_ratio"] > 0, side
    assert figures["this_single_thread.cpu_ratio"] > 0
    assert figures["this.ingest_ratio_vs_json_insert"] > 0
    missing = subprocess.run(
        [sys.executable, str(REPO / "bench" / "eventlog_ab.py"), "--base", str(tmp_path)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert missing.returncode != 0 and "no scroll_core package" in missing.stderr


def test_every_side_times_every_query_and_follows_each_other_side_as_often():
    import itertools

    from _common import time_in_turn

    calls: list[tuple[str, str]] = []

    def side(name: str):
        return lambda q: calls.append((name, q))

    queries = [f"q{i}" for i in range(12)]
    times = time_in_turn((side("ours"), side("raw"), side("agent")), queries, warm=2)
    assert [len(t) for t in times.wall] == [len(t) for t in times.cpu] == [12, 12, 12]
    timed = calls[2 * 3 :]  # after the two warming queries, untimed, on every side
    assert sorted(timed) == sorted((s, q) for q in queries for s in ("ours", "raw", "agent"))
    # Within each query, which side ran right after which: each ordered pair equally often,
    # so no side always runs on what another just warmed.
    follows: dict[tuple[str, str], int] = {}
    for at in range(0, len(timed), 3):
        names = [name for name, _ in timed[at : at + 3]]
        assert {q for _, q in timed[at : at + 3]} == {queries[at // 3]}
        for before, after in itertools.pairwise(names):
            follows[(before, after)] = follows.get((before, after), 0) + 1
    assert len(follows) == 6 and set(follows.values()) == {4}


@pytest.mark.parametrize("sides", range(1, 9))
def test_the_orders_put_each_side_after_each_other_and_in_each_place_equally_often(sides):
    import itertools

    from _common import balanced_orders

    orders = balanced_orders(sides)
    assert len(orders) == (sides if sides % 2 == 0 else 2 * sides)
    assert all(sorted(order) == list(range(sides)) for order in orders)
    follows: dict[tuple[int, int], int] = {}
    for order in orders:
        for pair in itertools.pairwise(order):
            follows[pair] = follows.get(pair, 0) + 1
    assert len(follows) == sides * (sides - 1)
    assert len(set(follows.values())) <= 1
    for place in range(sides):
        assert sorted(order[place] for order in orders) == sorted(
            list(range(sides)) * (len(orders) // sides)
        )


def test_kept_results_line_up_with_their_queries_and_sides():
    from _common import time_in_turn

    sides = [lambda q, n=n: f"{n}:{q}" for n in range(5)]
    queries = [f"q{i}" for i in range(13)]
    times = time_in_turn(sides, queries, warm=0, keep=True)
    assert times.results == [[f"{n}:{q}" for q in queries] for n in range(5)]
    assert time_in_turn(sides, queries, warm=0).results is None
    with pytest.raises(ValueError, match="no sides"):
        time_in_turn([], queries)
