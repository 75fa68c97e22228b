"""The built-in demo: an incident investigation over synthetic service logs.

Everything is generated deterministically from a seed, so every run of the demo sees the
same day: a payments API whose connection pool was cut from 50 to 8 by a config change at
09:14, a deploy at 10:02 that everyone blames first, an error spike at 13:47 and an outage
at 14:05 that only ends when the pool change is reverted at 14:41.

The operator's turns (``TURNS``) ask the session to pull those logs step by step through
host functions bound in the kernel as ``ops.*`` (``ops.config_changes()``, ``ops.deploys()``,
``ops.logs(service, start, end)``). With the demo profile's 6,000-token window the early
outputs are folded and evicted within the first minute; the last turns ask about facts from
the first ones, which the policy model can only answer through ``ms.search`` and
``ms.expand`` over the Event Log.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

__all__ = [
    "DAY",
    "DEMO_PROFILE",
    "RECALL_QUESTIONS",
    "TURNS",
    "config_changes",
    "deploys",
    "host_functions",
    "service_logs",
    "start_demo",
    "start_demo_once",
    "task_text",
]

DAY = "2024-03-12"
DEMO_PROFILE = "demo"
SEED = 4821
SERVICES = ("payments-api", "ledger-svc", "edge-gateway")

_CONFIG = [
    ("09:14", "CFG-2291", "dana.k", "payments-api", "db.pool.max_connections", "50", "8",
     "trim idle connections to cut database cost"),
    ("11:30", "CFG-2295", "li.w", "edge-gateway", "rate_limit.burst", "200", "250",
     "marketing campaign at noon"),
    ("12:05", "CFG-2297", "sam.o", "ledger-svc", "log.level", "info", "debug",
     "chasing a reconciliation mismatch"),
    ("14:41", "CFG-2302", "oncall.r", "payments-api", "db.pool.max_connections", "8", "50",
     "revert CFG-2291: pool exhaustion during INC-4821"),
]  # fmt: skip

_DEPLOYS = [
    ("08:40", "ledger-svc", "v7.3.2", "alex.m", "fix rounding in settlement export"),
    ("10:02", "payments-api", "v2.41.0", "priya.n", "retry idempotency keys on 409"),
    ("14:20", "payments-api", "v2.40.3", "oncall.r", "rollback of v2.41.0 (no effect)"),
]


def config_changes() -> list[str]:
    """Today's configuration changes, one line each (the culprit is the first)."""
    return [
        f"{DAY}T{at}Z {cid} by {who}: {svc} {key} {old} -> {new} ({why})"
        for at, cid, who, svc, key, old, new, why in _CONFIG
    ]


def deploys() -> list[str]:
    return [
        f"{DAY}T{at}Z deploy {svc} {version} by {who}: {note}"
        for at, svc, version, who, note in _DEPLOYS
    ]


def _minutes(hhmm: str) -> int:
    hours, sep, minutes = str(hhmm).partition(":")
    if not (sep and hours.isdigit() and minutes.isdigit() and int(minutes) < 60):
        raise ValueError(f"times are HH:MM, not {hhmm!r}")
    return int(hours) * 60 + int(minutes)


def service_logs(service: str, start: str, end: str) -> list[str]:
    """Log lines of ``service`` from ``start`` to ``end`` (HH:MM, UTC), deterministic."""
    if service not in SERVICES:
        raise ValueError(f"unknown service {service!r}; services: {', '.join(SERVICES)}")
    lo, hi = _minutes(start), _minutes(end)
    if not 0 <= lo < hi <= 24 * 60:
        raise ValueError("start must be before end, both within the day")
    rng = random.Random(f"{SEED}:{service}:{lo}:{hi}")
    lines = []
    for minute in range(lo, hi, 2):
        at = f"{DAY}T{minute // 60:02d}:{minute % 60:02d}:{rng.randrange(60):02d}Z"
        lines.append(f"{at} {service} " + _line(service, minute, rng))
    return lines


def _line(service: str, minute: int, rng: random.Random) -> str:
    spike, outage, fixed = _minutes("13:47"), _minutes("14:05"), _minutes("14:41")
    trace = f"trace={rng.getrandbits(48):012x}"
    if service == "payments-api":
        if spike <= minute < fixed and rng.random() < (0.9 if minute >= outage else 0.5):
            waited, queued = rng.randrange(4800, 5000), rng.randrange(20, 90)
            return (
                f"ERROR POST /v1/charges 503 {waited}ms {trace} PoolTimeoutError: timed out "
                f"waiting for a connection from pool (size=8, in_use=8, waiting={queued})"
            )
        latency = rng.randrange(35, 140) if minute < spike else rng.randrange(300, 900)
        route = rng.choice(["POST /v1/charges", "GET /v1/charges/{id}", "POST /v1/refunds"])
        return f"INFO {route} 200 {latency}ms {trace} pool_in_use={rng.randrange(2, 8)}"
    if service == "ledger-svc":
        if minute >= _minutes("12:05") and rng.random() < 0.3:
            return f"DEBUG reconcile batch={rng.randrange(1000, 9999)} drift=0.00 {trace}"
        return f"INFO settlement export rows={rng.randrange(100, 900)} {trace}"
    upstream = "payments-api"
    if outage <= minute < fixed and rng.random() < 0.7:
        return f"WARN upstream {upstream} 503 retry=2 {trace}"
    return f"INFO proxy {upstream} 200 {rng.randrange(40, 160)}ms {trace}"


def host_functions() -> dict[str, Callable[..., Any]]:
    """The ``ops.*`` functions the demo binds in the session's kernel."""
    return {
        "ops.config_changes": config_changes,
        "ops.deploys": deploys,
        "ops.logs": service_logs,
    }


def _pull(service: str, start: str, end: str, why: str) -> str:
    return (
        f"{why}\n```python\nlines = ops.logs({service!r}, {start!r}, {end!r})\n"
        "for line in lines:\n    print(line)\n```"
    )


# Questions whose answers were printed early and have been evicted by the time they are asked.
RECALL_QUESTIONS = (
    "Which config change earlier today set db.pool.max_connections on payments-api, and who "
    "made it?",
    "Which deploy of payments-api did priya.n ship in the morning?",
    "What PoolTimeoutError did payments-api log during the spike, and what pool size did it "
    "report?",
)

TURNS: tuple[str, ...] = (
    "Incident INC-4821: checkout is failing on payments-api since about 14:05 UTC. Start with "
    "today's configuration changes.\n```python\nfor line in ops.config_changes():\n"
    "    print(line)\n```",
    "Now today's deploys.\n```python\nfor line in ops.deploys():\n    print(line)\n```",
    _pull("payments-api", "09:00", "10:30", "Baseline: payments-api in the morning."),
    _pull("ledger-svc", "11:30", "13:00", "Check ledger-svc around the noon campaign."),
    _pull("edge-gateway", "12:00", "13:30", "And the gateway before the incident."),
    _pull("payments-api", "13:30", "14:10", "payments-api as the errors start."),
    _pull("edge-gateway", "14:00", "14:40", "What the gateway saw during the outage."),
    _pull("payments-api", "14:10", "14:50", "payments-api through the rollback and the fix."),
    *RECALL_QUESTIONS,
)


def task_text() -> str:
    """The demo's turns as one task text (turns separated by ``---`` lines)."""
    return "\n---\n".join(TURNS)


def start_demo(*, pause_s: float = 4.0, session_id: str | None = None) -> Any:
    """Queue the demo run; returns its RunRecord. Any worker binds the ``ops.*`` functions
    (the ``demo`` host function set)."""
    from dashboard import runner
    from dashboard.models import TuningProfile

    profile = TuningProfile.objects.filter(name=DEMO_PROFILE).first()
    return runner.start_run(
        task_text(),
        profile,
        None,
        kind="demo",
        turns=TURNS,
        host_set="demo",
        pause_s=pause_s,
        session_id=session_id,
    )


DEMO_MARKER = "demo_started"


def start_demo_once(*, pause_s: float = 4.0) -> Any:
    """Queue the demo the first time any process of this console asks; None afterwards.

    The marker is a row in the console's database, so it holds once per data folder (or per
    PostgreSQL database) however many processes start together: its unique name lets one
    insert win.
    """
    from django.db import IntegrityError, transaction

    from dashboard.models import ConsoleMarker

    try:
        with transaction.atomic():
            marker = ConsoleMarker.objects.create(name=DEMO_MARKER)
            run = start_demo(pause_s=pause_s)
            marker.detail = run.session_id[:200]
            marker.save(update_fields=["detail"])
    except IntegrityError:
        return None
    return run
