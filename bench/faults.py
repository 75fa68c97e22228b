"""Riding out PostgreSQL and Redis faults: how soon runs and the gateway work again after
each, and how many runs are lost (issue 30).

    python bench/faults.py --json [--quick] [--rounds N] [--fault-s S] [--redis-s S]

A real deployment on loopback (tests/cluster.py): one throwaway PostgreSQL of its own
(tests/servers.py) holding the console database and the Event Log (reached as the writer
login ``manage.py scroll_eventlog roles`` makes, as deploy/scale.yml does), a Redis of its
own (the channel layer and the gateway's shared limits), one daphne web process serving the
console and the gateway (a loopback upstream), and one ``scroll_worker`` process. Default
budgets (``SCROLL_DB_OUTAGE_S`` 60 s, the gateway's 2 s).

Each arm runs the same workload: three runs of short turns posted through the Runs form
(enough turns to outlast the longest fault); once each has a turn done, the fault begins,
lasts its time, and ends. From its end the bench polls the log for the next event a run
appends (``step_s``) and asks the gateway until it answers 200 (``gateway_s``); then it
waits for every run and counts those not done (``runs_lost``, which must be 0). The
``none`` arm does the same with no fault, in the same run: its ``step_s`` is the usual gap
between two appends, its ``gateway_s`` one reply. Arms alternate round by round:

- ``postgres_restart``: the server stopped (fast shutdown) and started again, after
  ``--fault-s``;
- ``revoke_insert``: ``REVOKE INSERT`` on the log's tables from ``scroll_writer``, then
  ``GRANT``;
- ``read_only``: ``default_transaction_read_only`` on for the whole server (a standby, as the
  console and the log see it: ALTER SYSTEM and a reload reach open sessions), then off;
- ``disk_full``: the log's tables on a 16 MB tmpfs of their own (a tablespace; mounting it
  needs root, as CI runs), filled with a ballast file until ENOSPC, then the file removed;
- ``redis_stop``: Redis stopped for ``--redis-s`` (10 s) and started again, empty (no
  persistence, as a restarted cache comes back);
- ``redis_restart_twice``: Redis stopped 1 s, started, up 1 s, stopped 1 s and started
  again; the fault ends at the second start.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import psycopg
from _common import emit, median  # puts the repository on sys.path
from gateway import Upstream

from tests import faults as fault_kit
from tests import servers
from tests.cluster import Cluster, Http, fresh_database, prepared
from tests.faults import admin, with_url

WRITER = "scroll_bench_app"
ARMS = (
    "none", "postgres_restart", "revoke_insert", "read_only", "disk_full", "redis_stop",
    "redis_restart_twice",
)  # fmt: skip
RUNS = 3
TURN_S = 0.3
# A run outlasts the longest fault by this much, so it is mid-run when the fault ends.
MARGIN_S = 4.0


def task(turns: int) -> str:
    return "\n---\n".join(
        f"```python\nimport time\ntime.sleep({TURN_S})\nprint('turn {t}')\n```"
        for t in range(turns)
    )


class Faults:
    """Each arm's fault on the PostgreSQL ``pg`` (``log_url``: the log's, as owner), the
    Redis ``redis`` and the log's small disk (None when it could not be mounted)."""

    def __init__(
        self, pg: Any, redis: Any, log_url: str, disk: Any, fault_s: float, redis_s: float
    ) -> None:
        self.pg, self.redis, self.log_url, self.disk = pg, redis, log_url, disk
        self.fault_s, self.redis_s = fault_s, redis_s

    def longest_s(self) -> float:
        return max(self.fault_s, self.redis_s, 3.0)

    def apply(self, arm: str) -> None:
        """Begin the fault, let it last, end it; returns at its end."""
        if arm == "redis_stop":
            self.redis.control.stop()
            time.sleep(self.redis_s)
            self.redis.control.start()
            return
        if arm == "redis_restart_twice":
            for restart in range(2):
                if restart:
                    time.sleep(1.0)  # up for a moment between the two
                self.redis.control.stop()
                time.sleep(1.0)
                self.redis.control.start()
            return
        self.begin(arm)
        time.sleep(self.fault_s)
        self.end(arm)

    def begin(self, arm: str) -> None:
        if arm == "postgres_restart":
            self.pg.control.stop()
        elif arm == "revoke_insert":
            with admin(self.log_url) as db:
                db.execute("REVOKE INSERT ON events, payloads FROM scroll_writer")
        elif arm == "read_only":
            self._read_only("on")
        elif arm == "disk_full":
            self.disk.fill()

    def end(self, arm: str) -> None:
        if arm == "postgres_restart":
            self.pg.control.start()
        elif arm == "revoke_insert":
            with admin(self.log_url) as db:
                db.execute("GRANT INSERT ON events, payloads TO scroll_writer")
        elif arm == "read_only":
            self._read_only(None)
        elif arm == "disk_full":
            self.disk.free()

    def _read_only(self, value: str | None) -> None:
        with admin(self.pg.url) as db:
            if value is None:
                db.execute("ALTER SYSTEM RESET default_transaction_read_only")
            else:
                db.execute(f"ALTER SYSTEM SET default_transaction_read_only = {value}")
            db.execute("SELECT pg_reload_conf()")


def _answer(work: Any, timeout: float = 60.0) -> Any:
    """``work()``, again while the database is still coming back."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return work()
        except psycopg.Error:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def _top_seq(log_url: str, sessions: list[str]) -> int:
    with psycopg.connect(log_url, autocommit=True) as db:
        row = db.execute(
            "SELECT coalesce(max(seq), 0) FROM events WHERE session_id = ANY(%s)", (sessions,)
        ).fetchone()
    return int(row[0]) if row else 0


def _statuses(console_url: str, sessions: list[str]) -> dict[str, tuple[str, int]]:
    with psycopg.connect(console_url, autocommit=True) as db:
        rows = db.execute(
            "SELECT session_id, status, turns FROM dashboard_runrecord WHERE session_id = ANY(%s)",
            (sessions,),
        ).fetchall()
    return {row[0]: (row[1], row[2]) for row in rows}


def _gateway_back(gateway: str, key: str, ended: float, out: dict[str, float]) -> None:
    body = {"model": "gpt-test", "messages": [{"role": "user", "content": "after the fault"}]}
    with httpx.Client(timeout=30) as client:
        while time.monotonic() - ended < 120:
            reply = client.post(
                f"{gateway}/v1/chat/completions",
                headers={"Authorization": f"Bearer {key}"},
                json=body,
            )
            if reply.status_code == 200:
                out["gateway_s"] = time.monotonic() - ended
                return
            out["gateway_refusals"] = out.get("gateway_refusals", 0) + 1
            time.sleep(0.05)


def run_arm(arm: str, http: Http, faults: Faults, urls: dict[str, str], work: str) -> dict:
    sessions = [http.start_run(work) for _ in range(RUNS)]
    deadline = time.monotonic() + 120
    while any(turns < 1 for _, turns in _statuses(urls["console"], sessions).values()):
        assert time.monotonic() < deadline, f"{arm}: the runs did not start"
        time.sleep(0.05)
    faults.apply(arm)
    ended = time.monotonic()
    result: dict[str, float] = {}
    gateway = threading.Thread(
        target=_gateway_back, args=(urls["gateway"], urls["key"], ended, result)
    )
    gateway.start()
    top = _answer(lambda: _top_seq(urls["log"], sessions))
    while _answer(lambda: _top_seq(urls["log"], sessions)) <= top:
        assert time.monotonic() - ended < 120, f"{arm}: no run appended after the fault"
        ran = _answer(lambda: _statuses(urls["console"], sessions)).values()
        assert any(status == "running" for status, _ in ran), (
            f"{arm}: every run ended during the fault; the workload is too short for it"
        )
        time.sleep(0.01)
    result["step_s"] = time.monotonic() - ended
    gateway.join()
    deadline = time.monotonic() + 180
    while True:
        statuses = _answer(lambda: _statuses(urls["console"], sessions))
        if all(status in ("done", "failed", "stopped") for status, _ in statuses.values()):
            break
        assert time.monotonic() < deadline, f"{arm}: runs still going: {statuses}"
        time.sleep(0.2)
    result["runs_lost"] = sum(1 for status, _ in statuses.values() if status != "done")
    result["runs"] = len(sessions)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quick", action="store_true", help="one round, 3 s faults")
    parser.add_argument("--rounds", type=int, default=None, help="rounds of all arms (2)")
    parser.add_argument("--fault-s", type=float, default=None,
                        help="PostgreSQL faults' length (5 s)")  # fmt: skip
    parser.add_argument("--redis-s", type=float, default=None,
                        help="how long redis_stop keeps Redis stopped (10 s)")  # fmt: skip
    args = parser.parse_args(argv)
    rounds = args.rounds or (1 if args.quick else 2)
    fault_s = args.fault_s or (3.0 if args.quick else 5.0)
    redis_s = args.redis_s or (3.0 if args.quick else 10.0)
    if rounds < 1 or fault_s <= 0 or redis_s <= 0:
        parser.error("--rounds, --fault-s and --redis-s must be positive")

    arms = list(ARMS)
    unavailable: dict[str, str] = {}
    samples: dict[str, list[dict[str, float]]] = {arm: [] for arm in arms}
    with ExitStack() as stack:
        pg = stack.enter_context(servers.postgres(own=True))
        redis = stack.enter_context(servers.redis(own=True))
        upstream = Upstream()
        stack.callback(upstream.close)
        log_owner = fresh_database(pg.url)
        root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="scroll-faults-")))
        owner = Cluster(root / "owner", None, None, workers="embedded")
        owner.manage("scroll_eventlog", "migrate", "--owner-url", log_owner)
        owner.manage("scroll_eventlog", "roles", "--apply", "--owner-url", log_owner,
                     "--writer", WRITER)  # fmt: skip
        try:
            disk = stack.enter_context(fault_kit.small_disk(log_owner))
        except fault_kit.DiskUnavailable as exc:
            disk = None
            unavailable["disk_full"] = f"no tmpfs could be mounted: {exc}"
            arms.remove("disk_full")
            samples.pop("disk_full")
        cluster = Cluster(
            root / "data",
            fresh_database(pg.url),
            redis.url,
            processes=2,
            lease_s=15,
            extra_env={"SCROLL_EVENTLOG_URL": with_url(log_owner, login=WRITER)},
        )
        stack.enter_context(prepared(cluster))
        web = cluster.start_web("web")
        cluster.start_worker("worker-1", slots=RUNS)
        key = cluster.query(
            "from dashboard.gateway.models import GatewayKey\n"
            f"result = GatewayKey.issue(agent_id='bench-faults', "
            f"upstream_base_url={upstream.url!r})[1]"
        )
        http = Http(web.base)
        http.login(cluster.password)
        assert cluster.database_url is not None
        urls = {"console": cluster.database_url, "log": log_owner, "gateway": web.base,
                "key": key}  # fmt: skip
        faults = Faults(pg, redis, log_owner, disk, fault_s, redis_s)
        work = task(math.ceil((faults.longest_s() + MARGIN_S) / TURN_S))
        # Warm the gateway's path (its first request imports and opens what the rest reuse),
        # so that no arm pays for it.
        _gateway_back(web.base, key, time.monotonic(), {})
        for _ in range(rounds):
            for arm in arms:
                samples[arm].append(run_arm(arm, http, faults, urls, work))
                print(f"# {arm}: {samples[arm][-1]}", file=sys.stderr)

    figures: dict[str, float] = {}
    for arm, rows in samples.items():
        for name in ("step_s", "gateway_s"):
            figures[f"{arm}.{name}"] = round(median([r[name] for r in rows]), 3)
        figures[f"{arm}.runs_lost"] = sum(int(r["runs_lost"]) for r in rows)
        figures[f"{arm}.runs"] = sum(int(r["runs"]) for r in rows)
        figures[f"{arm}.gateway_refusals"] = sum(int(r.get("gateway_refusals", 0)) for r in rows)
    emit(
        {
            "figures": figures,
            "fault_s": fault_s,
            "redis_s": redis_s,
            "rounds": rounds,
            "arms": arms,
            "unavailable": unavailable,
            "readme_tables": [
                {
                    "title": (
                        f"From a fault's end (PostgreSQL faults {fault_s:g} s, Redis stopped "
                        f"{redis_s:g} s) to the next run step and gateway 200, median s; runs "
                        "lost (must be 0); `none`: no fault"
                    ),
                    "rows": arms,
                    "columns": ["step_s", "gateway_s", "runs_lost", "runs"],
                    "key": "{row}.{column}",
                }
            ],
            "samples": samples,
        },
        args.json,
    )
    lost = sum(int(figures[f"{arm}.runs_lost"]) for arm in arms)
    return 1 if lost else 0


if __name__ == "__main__":
    raise SystemExit(main())
