"""Scaled out: runs completed per minute and span→client latency, by channel layer and workers.

    python bench/scale.py --json [--quick] [--runs N] [--turns N] [--slots N] [--rounds N]

Each arm is a real deployment on loopback (tests/cluster.py): a fresh database on one
throwaway PostgreSQL server (tests/servers.py; SCROLL_TEST_POSTGRES_URL / _REDIS_URL reuse
running ones), one daphne web process, and its workers. The arms run in this one invocation,
on the same servers, with the same runs, alternating round by round:

- ``memory_embedded_1``: the in-memory channel layer, one worker thread inside the web
  process (the only way the in-memory layer works: it does not cross processes, so there is
  no in-memory arm with worker processes);
- ``redis_embedded_1``: the same, on the Redis layer (the layer's own cost);
- ``redis_workers_1`` / ``redis_workers_2``: the web process runs nothing; one or two
  ``manage.py scroll_worker`` processes claim the runs (``--slots`` each).

A WebSocket client on the traces feed of the web process receives every span; its latency
is the time from the span's end (stamped by the worker) to its arrival, on one clock.
``runs_per_min`` counts from the first run posted to the last one ended. Prints the core
count: on a machine with fewer cores than workers, a second worker cannot add throughput.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from _common import emit, median, percentile  # puts the repository on sys.path

from tests import servers
from tests.cluster import Cluster, Http, drop_database, fresh_database

SPAN = re.compile(r'id="span-([0-9a-f]+)"[^>]*data-end-ns="(\d+)"')
ARMS = (
    # name, layer, workers ("embedded" or a count of worker processes)
    ("memory_embedded_1", "memory", "embedded"),
    ("redis_embedded_1", "redis", "embedded"),
    ("redis_workers_1", "redis", 1),
    ("redis_workers_2", "redis", 2),
)


def _task(run: int, turns: int) -> str:
    return "\n---\n".join(
        f"```python\nn = sum(range({run + 1} * 10_000))\nprint('run {run} turn {t}', n)\n```"
        for t in range(turns)
    )


class Feed:
    """A WebSocket on the traces feed, on a thread of its own, timing each span's arrival."""

    def __init__(self, url: str, headers: dict[str, str]) -> None:
        self.url, self.headers = url, headers
        self.latencies_ms: list[float] = []
        self.seen: set[str] = set()
        self.ready = threading.Event()
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._main, daemon=True)

    def start(self) -> None:
        self.thread.start()
        if not self.ready.wait(60):
            raise RuntimeError(f"the feed socket did not open: {self.error}")

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)

    def _main(self) -> None:
        try:
            asyncio.run(self._run())
        except BaseException as exc:  # reported by start()/the caller
            self.error = exc
            self.ready.set()

    async def _run(self) -> None:
        from websockets.asyncio.client import connect

        async with connect(self.url, additional_headers=self.headers, max_size=None) as ws:
            self.ready.set()
            while not self.stop.is_set():
                try:
                    frame = await asyncio.wait_for(ws.recv(), timeout=0.25)
                except TimeoutError:
                    continue
                now = time.time_ns()
                for span_id, end_ns in SPAN.findall(str(frame)):
                    if span_id not in self.seen:
                        self.seen.add(span_id)
                        self.latencies_ms.append((now - int(end_ns)) / 1e6)


def summarise(rounds: list[dict[str, Any]]) -> dict[str, float]:
    """One arm's figures over its rounds: runs per minute of all its time, pooled latencies."""
    latencies = [ms for r in rounds for ms in r["latencies_ms"]]
    if not latencies:
        raise RuntimeError("the feed socket received no span: the deployment is broken")
    done = sum(r["done"] for r in rounds)
    elapsed = sum(r["elapsed_s"] for r in rounds)
    return {
        "runs_per_min": round(done / elapsed * 60, 2) if elapsed else 0.0,
        "runs_done": done,
        "runs_failed": sum(r["failed"] for r in rounds),
        "span_to_client_p50_ms": round(median(latencies), 2),
        "span_to_client_p95_ms": round(percentile(latencies, 95), 2),
        "spans_received": len(latencies),
        "spans_missed": sum(r["missed"] for r in rounds),
    }


def run_arm(
    name: str, layer: str, workers: Any, pg_url: str, redis_url: str, args: argparse.Namespace
) -> dict[str, Any]:
    processes = 1 if workers == "embedded" else 1 + int(workers)
    root = Path(tempfile.mkdtemp(prefix=f"scroll-scale-{name}-"))
    database = fresh_database(pg_url)
    cluster = Cluster(
        root,
        database,
        redis_url if layer == "redis" else None,
        processes=processes,
        workers="embedded" if workers == "embedded" else "external",
        extra_env={"SCROLL_RUNNER_WORKERS": str(args.slots)},
    )
    try:
        cluster.prepare()
        web = cluster.start_web("web")
        for i in range(0 if workers == "embedded" else int(workers)):
            cluster.start_worker(f"worker-{i + 1}", slots=args.slots)
        http = Http(web.base)
        http.login(cluster.password)
        feed = Feed(f"ws://127.0.0.1:{web.port}/ws/feed/", http.ws_headers())
        feed.start()
        stored_before = cluster.stored_spans()
        started = time.monotonic()
        sessions = [http.start_run(_task(run, args.turns)) for run in range(args.runs)]
        deadline = started + args.timeout
        runs = cluster.runs()
        while any(r["status"] in ("queued", "running") for r in runs.values()):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name}: runs did not end within {args.timeout:g} s")
            time.sleep(0.25)
            runs = cluster.runs()
        elapsed = time.monotonic() - started
        # Spans of the last steps are still on their way when the last run ends: wait until
        # the socket has had every span stored since it opened (or give up after a while).
        expected = cluster.stored_spans() - stored_before
        settle = time.monotonic() + 60
        while len(feed.seen) < expected and time.monotonic() < settle:
            time.sleep(0.1)
        feed.close()
        if feed.error is not None:
            raise RuntimeError(f"{name}: the feed socket failed: {feed.error}")
        done = sum(1 for sid in sessions if runs[sid]["status"] == "done")
        return {
            "missed": max(0, expected - len(feed.seen)),
            "done": done,
            "failed": len(sessions) - done,
            "elapsed_s": elapsed,
            "latencies_ms": feed.latencies_ms,
        }
    finally:
        cluster.stop()
        drop_database(database)
        shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quick", action="store_true", help="few short runs (a smoke run)")
    parser.add_argument("--runs", type=int, default=None, help="runs per arm, round (default 12)")
    parser.add_argument("--turns", type=int, default=3, help="turns per run")
    parser.add_argument("--slots", type=int, default=2, help="runs at once per worker")
    parser.add_argument("--rounds", type=int, default=None, help="rounds of all arms (default 2)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per arm")
    args = parser.parse_args(argv)
    if args.runs is None:
        args.runs = 4 if args.quick else 12
    if args.rounds is None:
        args.rounds = 1 if args.quick else 2
    if args.quick:
        args.turns = min(args.turns, 2)
    if min(args.runs, args.turns, args.slots, args.rounds) < 1:
        parser.error("--runs, --turns, --slots and --rounds must be at least 1")
    try:
        import websockets  # noqa: F401
    except ImportError:
        parser.error("the websockets package is needed: pip install -e '.[dev]'")
    cores = os.cpu_count() or 0
    print(f"cores: {cores}", file=sys.stderr)

    figures: dict[str, float] = {"cores": cores}
    arms: dict[str, Any] = {}
    with ExitStack() as stack:
        try:
            pg = stack.enter_context(servers.postgres())
            rd = stack.enter_context(servers.redis())
        except servers.ServerUnavailable as exc:
            print(f"PostgreSQL and Redis are needed: {exc}", file=sys.stderr)
            return 1
        # Rounds alternate the arms (A B C D A B C D ...) so a change in the machine's load
        # falls on every arm alike.
        raw: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _ in ARMS}
        for round_no in range(args.rounds):
            for name, layer, workers in ARMS:
                print(f"== round {round_no + 1}: {name}", file=sys.stderr)
                raw[name].append(run_arm(name, layer, workers, pg.url, rd.url, args))
                arms[name] = {"layer": layer, "workers": workers}
    for name, rounds in raw.items():
        result = summarise(rounds)
        print(f"   {name}: {result}", file=sys.stderr)
        for key, value in result.items():
            figures[f"{name}.{key}"] = value
    emit(
        {
            "figures": figures,
            "arms": arms,
            "runs_per_arm_and_round": args.runs,
            "rounds": args.rounds,
            "turns_per_run": args.turns,
            "slots_per_worker": args.slots,
            "cores": cores,
        },
        args.json,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
