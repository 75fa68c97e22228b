"""Riding out PostgreSQL faults: how soon runs and the gateway work again after each, and
how many runs are lost (issue 30).

    python bench/faults.py --json [--quick] [--rounds N] [--fault-s S]

A real deployment on loopback (tests/cluster.py): one throwaway PostgreSQL of its own
(tests/servers.py) holding the console database and the Event Log (reached as the writer
login ``manage.py scroll_eventlog roles`` makes, as deploy/scale.yml does), Redis, one daphne
web process serving the console and the gateway (a loopback upstream), and one
``scroll_worker`` process. Default budgets (``SCROLL_DB_OUTAGE_S`` 60 s, the gateway's 2 s).

Each arm runs the same workload: three runs of 30 short turns posted through the Runs form;
once each has a turn done, the fault begins, lasts ``--fault-s`` seconds, and ends. From its
end the bench polls the log for the next event a run appends (``step_s``) and asks the
gateway until it answers 200 (``gateway_s``); then it waits for every run and counts those
not done (``runs_lost``, which must be 0). The ``none`` arm does the same with no fault, in
the same run: its ``step_s`` is the usual gap between two appends, its ``gateway_s`` one
reply. Arms alternate round by round:

- ``postgres_restart``: the server stopped (fast shutdown) and started again;
- ``revoke_insert``: ``REVOKE INSERT`` on the log's tables from ``scroll_writer``, then
  ``GRANT``;
- ``read_only``: ``default_transaction_read_only`` on for the whole server (a standby, as the
  console and the log see it: ALTER SYSTEM and a reload reach open sessions), then off.
"""

from __future__ import annotations

import argparse
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

from tests import servers
from tests.cluster import Cluster, Http, fresh_database, prepared

WRITER = "scroll_bench_app"
ARMS = ("none", "postgres_restart", "revoke_insert", "read_only")
RUNS = 3
# Turns of 0.3 s or more: a run outlasts the fault, so it is mid-run when the fault ends.
TURNS = 30
TASK = "\n---\n".join(
    f"```python\nimport time\ntime.sleep(0.3)\nprint('turn {t}')\n```" for t in range(TURNS)
)


def _admin(url: str) -> psycopg.Connection[Any]:
    return psycopg.connect(url, autocommit=True, options="-c default_transaction_read_only=off")


def _with(url: str, *, login: str | None = None, database: str | None = None) -> str:
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if login is not None:
        parts = parts._replace(netloc=f"{login}@{parts.hostname}:{parts.port}")
    if database is not None:
        parts = parts._replace(path=f"/{database}")
    return urlunsplit(parts)


class Faults:
    """Begin and end each fault on the server ``pg`` (``log_url``: the log's, as owner)."""

    def __init__(self, pg: Any, log_url: str) -> None:
        self.pg, self.log_url = pg, log_url

    def begin(self, arm: str) -> None:
        if arm == "postgres_restart":
            self.pg.control.stop()
        elif arm == "revoke_insert":
            with _admin(self.log_url) as db:
                db.execute("REVOKE INSERT ON events, payloads FROM scroll_writer")
        elif arm == "read_only":
            self._read_only("on")

    def end(self, arm: str) -> None:
        if arm == "postgres_restart":
            self.pg.control.start()
        elif arm == "revoke_insert":
            with _admin(self.log_url) as db:
                db.execute("GRANT INSERT ON events, payloads TO scroll_writer")
        elif arm == "read_only":
            self._read_only(None)

    def _read_only(self, value: str | None) -> None:
        with _admin(self.pg.url) as db:
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


def run_arm(arm: str, http: Http, faults: Faults, urls: dict[str, str], fault_s: float) -> dict:
    sessions = [http.start_run(TASK) for _ in range(RUNS)]
    deadline = time.monotonic() + 120
    while any(turns < 1 for _, turns in _statuses(urls["console"], sessions).values()):
        assert time.monotonic() < deadline, f"{arm}: the runs did not start"
        time.sleep(0.05)
    faults.begin(arm)
    time.sleep(fault_s)
    faults.end(arm)
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
    parser.add_argument("--fault-s", type=float, default=None, help="fault length (5 s)")
    args = parser.parse_args(argv)
    rounds = args.rounds or (1 if args.quick else 2)
    fault_s = args.fault_s or (3.0 if args.quick else 5.0)

    samples: dict[str, list[dict[str, float]]] = {arm: [] for arm in ARMS}
    with ExitStack() as stack:
        pg = stack.enter_context(servers.postgres(own=True))
        redis = stack.enter_context(servers.redis())
        upstream = Upstream()
        stack.callback(upstream.close)
        log_owner = fresh_database(pg.url)
        root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="scroll-faults-")))
        owner = Cluster(root / "owner", None, None, workers="embedded")
        owner.manage("scroll_eventlog", "migrate", "--owner-url", log_owner)
        owner.manage("scroll_eventlog", "roles", "--apply", "--owner-url", log_owner,
                     "--writer", WRITER)  # fmt: skip
        cluster = Cluster(
            root / "data",
            fresh_database(pg.url),
            redis.url,
            processes=2,
            lease_s=15,
            extra_env={"SCROLL_EVENTLOG_URL": _with(log_owner, login=WRITER)},
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
        faults = Faults(pg, log_owner)
        # Warm the gateway's path (its first request imports and opens what the rest reuse),
        # so that no arm pays for it.
        _gateway_back(web.base, key, time.monotonic(), {})
        for _ in range(rounds):
            for arm in ARMS:
                samples[arm].append(run_arm(arm, http, faults, urls, fault_s))
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
            "rounds": rounds,
            "arms": list(ARMS),
            "readme_tables": [
                {
                    "title": (
                        f"From a fault's end ({fault_s:g} s long) to the next run step and "
                        "gateway 200, median s; runs lost (must be 0); `none`: no fault"
                    ),
                    "rows": list(ARMS),
                    "columns": ["step_s", "gateway_s", "runs_lost", "runs"],
                    "key": "{row}.{column}",
                }
            ],
            "samples": samples,
        },
        args.json,
    )
    lost = sum(int(figures[f"{arm}.runs_lost"]) for arm in ARMS)
    return 1 if lost else 0


if __name__ == "__main__":
    raise SystemExit(main())
