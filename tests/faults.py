"""The fault suite's workload and its checks (``tests/test_faults_postgres.py``,
``tests/test_faults_redis.py``; their fixtures are in ``tests/fault_fixtures.py``).

A ``Workload`` drives what a deployment does while a fault happens: runs executed by a real
worker, gateway requests through the real gateway (daphne on loopback, a loopback
upstream), pages through the console. ``run_through`` starts runs before the fault, begins
the fault, starts another run and asks the gateway and the pages during it, ends the fault
(again, for a fault that comes ``times`` times in a row), then asks again until the gateway
answers, and waits for every run. ``Outcome`` holds what was seen; ``assert_nothing_lost``
checks what every fault must leave: every run done, no event twice, the log's
``session_stats`` equal to its rows, only provider-shaped 503s from the gateway during the
fault and 200s after it, and no page answered 500.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg

CELL = "Run this.\n```python\nx = 6 * 7\nprint('answer', x)\n```"
PLAN = f"{CELL}\n---\n{CELL}\n---\n{CELL}"
TURNS = 3
# How long each fault lasts: longer than the log's own retry budget in these tests
# (SCROLL_DB_OUTAGE_S=1), so a run meets the fault instead of the log hiding it.
FAULT_S = 3.0
END_TIMEOUT_S = 90.0


@dataclass
class Outcome:
    runs: list[Any] = field(default_factory=list)
    gateway_during: list[httpx.Response] = field(default_factory=list)
    gateway_after: list[httpx.Response] = field(default_factory=list)
    # Requests the upstream received while the gateway answered during the fault, per reply.
    upstream_during: list[int] = field(default_factory=list)
    gateway_session: str = ""
    pages: list[tuple[str, int]] = field(default_factory=list)
    pages_after: list[tuple[str, int]] = field(default_factory=list)
    # Seconds from the fault's end to the first gateway 200 and the first run step after it.
    gateway_back_s: float | None = None
    step_back_s: float | None = None


@dataclass
class Fault:
    name: str
    begin: Callable[[], None]
    end: Callable[[], None]
    # The gateway must refuse during it (it cannot append); else a 200 is fine too.
    gateway_refused: bool = True
    # New runs can be queued during it (the console database takes writes).
    queue_during: bool = True
    # The error code of the gateway's 503 during it: what it could not reach.
    refusal_code: str = "database_unavailable"
    # How many times in a row it happens (begin, the requests during it, end; again).
    times: int = 1


def with_url(url: str, *, login: str | None = None, database: str | None = None) -> str:
    """``url`` with another login and/or database."""
    parts = urlsplit(url)
    if login is not None:
        parts = parts._replace(netloc=f"{login}@{parts.hostname}:{parts.port}")
    if database is not None:
        parts = parts._replace(path=f"/{database}")
    return urlunsplit(parts)


def admin(url: str) -> psycopg.Connection[Any]:
    """An owner's session that is never read-only, whatever the server's default says."""
    return psycopg.connect(url, autocommit=True, options="-c default_transaction_read_only=off")


class DiskUnavailable(RuntimeError):
    """No small filesystem could be mounted for the disk-full fault (the message says why)."""


@dataclass
class SmallDisk:
    """A small filesystem holding the log's tables: ``fill`` takes all its space (a file
    written until ENOSPC), ``free`` gives it back."""

    root: Path

    @property
    def ballast(self) -> Path:
        return self.root / "ballast"

    def fill(self) -> None:
        with self.ballast.open("wb") as out:
            try:
                while True:
                    out.write(b"\0" * (1 << 20))
                    out.flush()
                    os.fsync(out.fileno())
            except OSError:
                pass  # ENOSPC: the disk is full

    def free(self) -> None:
        self.ballast.unlink(missing_ok=True)


@contextmanager
def small_disk(owner_url: str, size_mb: int = 16) -> Iterator[SmallDisk]:
    """The Event Log's ``events`` and ``payloads`` (``owner_url``: its database, as owner)
    moved to a tablespace on a tmpfs of ``size_mb`` mounted here (as root, as CI runs), and
    moved back and unmounted at the end. PostgreSQL then refuses what does not fit with its
    own disk-full error (53100), as it would on a full volume; its WAL stays where it was."""
    root = Path(tempfile.mkdtemp(prefix="scroll-faults-disk-"))
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m,mode=0755", "tmpfs", str(root)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        raise DiskUnavailable(mounted.stderr.strip() or f"mount exited {mounted.returncode}")
    disk = SmallDisk(root)
    space = root / "tablespace"
    try:
        space.mkdir()
        shutil.chown(space, "postgres", "postgres")
        name = f"small_{uuid.uuid4().hex[:8]}"
        with admin(owner_url) as db:
            db.execute(f"CREATE TABLESPACE {name} LOCATION '{space}'")
            db.execute(f"ALTER TABLE events SET TABLESPACE {name}")
            db.execute(f"ALTER TABLE payloads SET TABLESPACE {name}")
        yield disk
        disk.free()
        with admin(owner_url) as db:
            db.execute("ALTER TABLE events SET TABLESPACE pg_default")
            db.execute("ALTER TABLE payloads SET TABLESPACE pg_default")
            db.execute(f"DROP TABLESPACE {name}")
    finally:
        disk.free()
        subprocess.run(["umount", "-l", str(root)], check=False)
        shutil.rmtree(root, ignore_errors=True)


def runs_waited(records: list[Any]) -> bool:
    """Whether a run met the fault (and waited for the database), as the worker logs it."""
    return any("waits for the database" in r.getMessage() for r in records)


def wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = predicate()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


class Workload:
    """Runs, gateway requests and page views against the console under test."""

    def __init__(self, *, gateway: str, key: str, client: Any, upstream: Any) -> None:
        self.gateway, self.key, self.client, self.upstream = gateway, key, client, upstream
        self.session = ""

    def ask_gateway(self, text: str) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.key}"}
        if self.session:
            headers["X-Scroll-Session"] = self.session
        return httpx.post(
            f"{self.gateway}/v1/chat/completions",
            headers=headers,
            json={"model": "gpt-test", "messages": [{"role": "user", "content": text}]},
            timeout=30,
        )

    def view_pages(self, into: list[tuple[str, int]], session_ids: list[str]) -> None:
        paths = ["/", "/runs/", "/sessions/no-such-session/"]
        paths += [f"/sessions/{sid}/" for sid in session_ids[:1]]
        for path in paths:
            into.append((path, self.client.get(path).status_code))

    def run_through(self, fault: Fault, *, before: int = 2) -> Outcome:
        from dashboard.runs import runner
        from dashboard.runs.models import RunRecord

        out = Outcome()
        first = self.ask_gateway("before the fault")
        assert first.status_code == 200, first.text
        self.session = out.gateway_session = first.headers["x-scroll-session"]
        out.runs = [runner.start_run(PLAN, pause_s=0.3) for _ in range(before)]
        wait_for(
            lambda: all(RunRecord.objects.get(pk=r.pk).turns >= 1 for r in out.runs),
            60,
            "every run's first turn",
        )
        for _ in range(fault.times):
            fault.begin()
            try:
                if fault.queue_during:
                    out.runs.append(runner.start_run(PLAN, pause_s=0.3))
                sent = len(self.upstream.requests)
                out.gateway_during.append(self.ask_gateway("during the fault"))
                out.upstream_during.append(len(self.upstream.requests) - sent)
                self.view_pages(out.pages, [r.session_id for r in out.runs])
                time.sleep(max(0.0, FAULT_S - 2.0))
            finally:
                fault.end()
        ended = time.monotonic()
        steps = {r.pk: RunRecord.objects.get(pk=r.pk).steps for r in out.runs}
        while True:
            reply = self.ask_gateway("after the fault")
            out.gateway_after.append(reply)
            if reply.status_code == 200:
                out.gateway_back_s = time.monotonic() - ended
                break
            assert time.monotonic() - ended < 30, f"the gateway still answers {reply.text}"
            time.sleep(float(reply.headers.get("retry-after", "0.2")) / 4)
        self.view_pages(out.pages_after, [r.session_id for r in out.runs])

        def stepped() -> bool:
            now = {r.pk: RunRecord.objects.get(pk=r.pk) for r in out.runs}
            return any(
                row.steps > steps[pk] or row.status != RunRecord.RUNNING for pk, row in now.items()
            )

        wait_for(stepped, 60, "a run step after the fault")
        out.step_back_s = time.monotonic() - ended
        wait_for(
            lambda: (
                not RunRecord.objects.filter(
                    pk__in=[r.pk for r in out.runs],
                    status__in=(RunRecord.QUEUED, RunRecord.RUNNING),
                ).exists()
            ),
            END_TIMEOUT_S,
            "every run's end",
        )
        out.runs = [RunRecord.objects.get(pk=r.pk) for r in out.runs]
        return out


def assert_nothing_lost(out: Outcome, fault: Fault, owner_url: str) -> None:
    """What every fault must leave behind; see the module docstring."""
    from dashboard.eventlog import get_event_log
    from dashboard.gateway.service import get_service

    get_service().flush()  # whatever the gateway holds in its batch is in the log
    # Done, whole, and by the worker that claimed it: it paused and resumed with its lease,
    # never failed and claimed again once the lease ran out.
    ended = {r.session_id: (r.status, r.error[:300], r.turns, r.attempts) for r in out.runs}
    assert set(ended.values()) == {("done", "", TURNS, 1)}, ended
    log = get_event_log()
    for run in out.runs:
        events = log.session_events(run.session_id, limit=None)
        assert len({e.seq for e in events}) == len(events)
        keyed = Counter(e.dedup_key for e in events if e.dedup_key)
        assert [k for k, n in keyed.items() if n > 1] == [], run.session_id
        users = [e.content for e in events if e.role == "user"]
        assert users == run.plan, f"{run.session_id}: a turn lost or appended twice"
    with psycopg.connect(owner_url, autocommit=True) as db:
        differ = db.execute(
            "SELECT s.session_id FROM session_stats s LEFT JOIN (SELECT session_id, count(*) n, "
            "min(seq) lo, max(seq) hi FROM events GROUP BY session_id) e USING (session_id) "
            "WHERE (s.events, s.first_seq, s.last_seq) IS DISTINCT FROM (e.n, e.lo, e.hi)"
        ).fetchall()
        unstated = db.execute(
            "SELECT count(DISTINCT session_id) FROM events WHERE session_id NOT IN "
            "(SELECT session_id FROM session_stats)"
        ).fetchone()[0]
    assert (differ, unstated) == ([], 0), "session_stats disagree with the events"
    for reply, upstream in zip(out.gateway_during, out.upstream_during, strict=True):
        if reply.status_code == 200 and not fault.gateway_refused:
            continue
        assert upstream == 0, f"{fault.name}: a refused request was sent upstream"
        kept = [e for e in log.session_events(out.gateway_session, limit=None)
                if "during the fault" in e.content]  # fmt: skip
        assert kept == [], f"{fault.name}: a refused request left events in the log"
        assert reply.status_code == 503, (fault.name, reply.status_code, reply.text[:500])
        assert reply.headers["content-type"] == "application/json"
        assert int(reply.headers["retry-after"]) > 0
        error = reply.json()["error"]
        assert (error["type"], error["code"]) == ("service_unavailable", fault.refusal_code)
    assert out.gateway_after[-1].status_code == 200
    assert all(r.status_code in (200, 503) for r in out.gateway_after), [
        r.status_code for r in out.gateway_after
    ]
    assert [p for p in out.pages if p[1] == 500] == [], out.pages
    assert all(status in (200, 404, 503) for _, status in out.pages), out.pages
    # Once the database answers, pages work at once (a missing session is a 404, not a 500).
    assert dict(out.pages_after) == {
        "/": 200, "/runs/": 200, "/sessions/no-such-session/": 404,
        f"/sessions/{out.runs[0].session_id}/": 200,
    }, out.pages_after  # fmt: skip
