"""What the gateway's shared limits cost a request: ``admit`` (rate limit, token budget and
the session's lease) in memory (one web process) and in Redis (several), timed in one run,
the two interleaved round by round so both see the same machine; and holding the session for
the request (``hold`` then ``unhold``: two Redis round trips behind several processes, nothing
in one), ``*_hold_p50_ms``.

    python bench/gateway_shared.py --json [--quick] [--calls 3000]

Needs ``redis-server`` on the PATH (a throwaway one is started on loopback). The Redis figure
is one round trip to a Redis on the same machine; across a network add its round-trip time.
"""

from __future__ import annotations

import argparse
import itertools
import os
import time
from pathlib import Path

from _common import emit, envelope, percentile

from dashboard.gateway.shared import LocalLimits, RedisLimits
from tests import servers

SESSIONS = 50  # requests spread over this many sessions, each held by this process
ROUNDS = 10


def _time(limits: object, calls: int, rate: int, budget: int, out: list[float]) -> None:
    admit = limits.admit  # type: ignore[attr-defined]
    for i in range(calls):
        began = time.perf_counter()
        admit(1, rate, budget, 0, f"s{i % SESSIONS}")
        out.append((time.perf_counter() - began) * 1000)


def _time_hold(limits: object, calls: int, out: list[float]) -> None:
    hold, unhold = limits.hold, limits.unhold  # type: ignore[attr-defined]
    for i in range(calls):
        began = time.perf_counter()
        unhold(hold(f"s{i % SESSIONS}", 0.0))
        out.append((time.perf_counter() - began) * 1000)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="print JSON and write --out")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    parser.add_argument("--calls", type=int, default=3000, help="timed admits per arm")
    parser.add_argument("--quick", action="store_true", help="500 admits per arm")
    args = parser.parse_args()
    calls = 500 if args.quick else args.calls
    result: dict[str, float] = {"load_at_start": os.getloadavg()[0]}
    with servers.redis() as server:
        arms = {
            "memory": LocalLimits("gateway:bench"),
            "redis": RedisLimits(server.url, "gateway:bench", 15.0, namespace="bench"),
        }
        limits_on = {"lease": (0, 0), "limits": (10**9, 10**15)}
        times: dict[str, list[float]] = {f"{a}_{k}": [] for a in arms for k in limits_on}
        holds: dict[str, list[float]] = {a: [] for a in arms}
        for _ in range(ROUNDS):  # interleaved: every arm gets every stretch of the machine
            for (arm, limits), (kind, (rate, budget)) in itertools.product(
                arms.items(), limits_on.items()
            ):
                _time(limits, max(1, calls // ROUNDS), rate, budget, times[f"{arm}_{kind}"])
            for arm, limits in arms.items():
                _time_hold(limits, max(1, calls // ROUNDS), holds[arm])
        arms["redis"].close()
    for name, values in times.items():
        result[f"{name}_admit_p50_ms"] = percentile(values, 50)
        result[f"{name}_admit_p95_ms"] = percentile(values, 95)
    for arm, values in holds.items():
        result[f"{arm}_hold_p50_ms"] = percentile(values, 50)
        result[f"{arm}_hold_p95_ms"] = percentile(values, 95)
    result["load_at_end"] = os.getloadavg()[0]
    emit(result, args.json, quick=args.quick)
    if args.json and args.out is not None:
        import json

        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(envelope(result, quick=args.quick), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
