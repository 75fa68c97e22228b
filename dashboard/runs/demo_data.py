"""The demo's synthetic day, generated deterministically from a seed: configuration changes,
deploys and service logs of a payments incident, and the ``ops.*`` host functions that read
them. Any worker binds these (the ``demo`` host function set); ``demo`` queues the run.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

__all__ = ["DAY", "SERVICES", "config_changes", "deploys", "host_functions", "service_logs"]

DAY = "2024-03-12"
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
