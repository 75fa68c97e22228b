"""A console-database outage longer than a run's lease (issue 30): the lease runs out while
no worker can renew it, so when the database answers again every running run looks
abandoned. An idle worker must not take it over from the worker that still drives it (a
second claim would resume the run beside its live owner, and both would append to its log):
the owner renews first, and each run finishes done on its first and only claim.

Real processes over a PostgreSQL server of this module's own (tests/cluster.py): two
``scroll_worker`` processes with a 2 s lease; the first claims every run, the second is idle
and polling when the server is stopped for three leases and started again, twice. The Event
Log is the cluster's SQLite file, so only the console database goes away. Before the fix the
idle worker took over runs in 2 tries of 2 (once three runs, once one run twice).
"""

from __future__ import annotations

import time
from collections import Counter

import pytest

from tests.cluster import Cluster, fresh_database, prepared

pytestmark = pytest.mark.slow

RUNS = 3
LEASE_S = 2
OUTAGE_S = 3 * LEASE_S
OUTAGES = 2
TURNS = 20
TASK = "\n---\n".join(
    f"```python\nimport time\ntime.sleep(0.3)\nprint('turn {t}')\n```" for t in range(TURNS)
)


@pytest.fixture
def cluster(tmp_path, stoppable_pg, redis_server):
    cluster = Cluster(
        tmp_path / "data", fresh_database(stoppable_pg.url), redis_server.url, lease_s=LEASE_S
    )
    try:
        with prepared(cluster):
            yield cluster
    finally:
        stoppable_pg.control.start()


def _wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        got = predicate()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_an_idle_worker_does_not_take_over_runs_whose_lease_ran_out_in_an_outage(
    cluster, stoppable_pg
):
    sessions = cluster.query(
        "from dashboard.runs import runner\n"
        f"result = [runner.start_run({TASK!r}).session_id for _ in range({RUNS})]"
    )
    owner = cluster.start_worker("worker-1", slots=RUNS)
    _wait(lambda: all(r["turns"] >= 1 for r in cluster.runs().values()), 90, "every run's turn")
    cluster.start_worker("worker-2", slots=RUNS)
    assert {r["worker"] for r in cluster.runs().values()} == {"worker-1"}

    for outage in range(OUTAGES):  # each end is a race the idle worker could win
        if outage:
            time.sleep(1.0)
        stoppable_pg.control.stop()
        time.sleep(OUTAGE_S)
        stoppable_pg.control.start()

    def ended() -> dict | None:
        runs = cluster.runs()
        going = [r for r in runs.values() if r["status"] in ("queued", "running")]
        return None if going else runs

    runs = _wait(ended, 120, "every run's end")
    seen = {sid: (r["status"], r["worker"], r["attempts"], r["turns"]) for sid, r in runs.items()}
    assert seen == {sid: ("done", "worker-1", 1, TURNS) for sid in sessions}, seen
    assert "lost the lease" not in owner.output(), owner.output()[-3000:]
    events = cluster.query(
        "from dashboard.eventlog import get_event_log\n"
        "log = get_event_log()\n"
        f"result = {{s: [(e.role, e.content, e.dedup_key) for e in "
        f"log.session_events(s, limit=None)] for s in {sessions!r}}}"
    )
    for sid, rows in events.items():
        keys = Counter(key for _, _, key in rows if key)
        assert [k for k, n in keys.items() if n > 1] == [], f"{sid}: an event appended twice"
        users = [content for role, content, _ in rows if role == "user"]
        assert len(users) == TURNS, f"{sid}: {len(users)} user turns"
