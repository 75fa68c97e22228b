"""Kernel benchmark: round trips, ms overhead, cold and warm start, memory, per tier.

    python bench/kernel.py --json [--n 500]

Medians and p99 over ``--n`` runs. ``raw_pipe_roundtrip_p50_ms`` is a bare JSON-lines echo
child started the same way (``python -I -S``), so ``exec_overhead_ratio`` is what the kernel
adds on top of the pipe itself.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scroll_core import EventLog
from scroll_core.kernel import Kernel, KernelConfig, KernelManager, bwrap_status
from scroll_core.kernel.ms import MsCapability
from scroll_core.kernel.sandbox import PYTHON

ECHO = (
    "import sys, json\n"
    "r, w = sys.stdin.buffer, sys.stdout.buffer\n"
    "for line in r:\n"
    "    m = json.loads(line); w.write(json.dumps({'op': 'pong', 'id': m['id']}).encode() + b'\\n')"
    "; w.flush()\n"
)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def timed(fn: Any, n: int) -> list[float]:
    out = []
    for _ in range(n):
        began = time.perf_counter()
        fn()
        out.append((time.perf_counter() - began) * 1000)
    return out


def raw_pipe(n: int) -> float:
    proc = subprocess.Popen(
        [PYTHON, "-I", "-S", "-c", ECHO], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env={}
    )
    assert proc.stdin is not None and proc.stdout is not None
    stdin, stdout = proc.stdin, proc.stdout

    def once() -> None:
        stdin.write(b'{"op":"ping","id":1}\n')
        stdin.flush()
        stdout.readline()

    timed(once, 50)
    samples = timed(once, n)
    stdin.close()
    proc.wait()
    stdout.close()
    return statistics.median(samples)


def rss_mb(pid: int) -> float:
    """RSS of the kernel's Python process (for bwrap, the deepest descendant)."""
    target = pid
    for _ in range(4):
        children = Path(f"/proc/{target}/task/{target}/children")
        try:
            kids = children.read_text().split()
        except OSError:
            break
        if not kids:
            break
        target = int(kids[0])
    for line in Path(f"/proc/{target}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def bench_tier(tier: str, n: int, log: EventLog) -> dict[str, float]:
    config = KernelConfig(sandbox=tier)
    ms = MsCapability(log)
    with Kernel(config, host_functions=ms.functions()) as kernel:
        timed(lambda: kernel.execute(""), 50)
        empty = timed(lambda: kernel.execute(""), n)
        cell = timed(lambda: kernel.execute("hits = ms.search('zebra stripes', k=10)"), n // 5)
        host = timed(lambda: log.search("zebra stripes", k=10), n // 5)
        rss = rss_mb(kernel.pid or 0)
    ms.close()
    colds = []
    for _ in range(5):
        began = time.perf_counter()
        Kernel(config).close()
        colds.append((time.perf_counter() - began) * 1000)
    warms = []
    with KernelManager(config, pool_size=1) as manager:
        for i in range(5):
            manager.wait_warm()
            began = time.perf_counter()
            manager.get(f"s{i}")
            warms.append((time.perf_counter() - began) * 1000)
    raw = raw_pipe(n)
    p50 = statistics.median(empty)
    return {
        "exec_roundtrip_p50_ms": round(p50, 3),
        "exec_roundtrip_p99_ms": round(pct(empty, 0.99), 3),
        "raw_pipe_roundtrip_p50_ms": round(raw, 3),
        "exec_overhead_ratio": round(p50 / raw, 2),
        "ms_search_cell_p50_ms": round(statistics.median(cell), 3),
        "ms_search_host_p50_ms": round(statistics.median(host), 3),
        "ms_search_overhead_ratio": round(statistics.median(cell) / statistics.median(host), 2),
        "cold_start_ms": round(statistics.median(colds), 1),
        "warm_start_ms": round(statistics.median(warms), 3),
        "kernel_rss_mb": round(rss, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--n", type=int, default=500, help="samples per round-trip figure")
    args = parser.parse_args()
    ok, why = bwrap_status()
    tiers = ["bwrap", "process"] if ok else ["process"]
    with tempfile.TemporaryDirectory() as tmp:
        log = EventLog(os.path.join(tmp, "eventlog.sqlite3"))
        words = ["zebra", "stripes", "paris", "lion", "river", "tool", "error", "commit"]
        log.append_many(
            {
                "session_id": f"s{i % 7}",
                "kind": "context_msg",
                "content": " ".join(words[(i + j) % len(words)] for j in range(12)) + f" #{i}",
            }
            for i in range(2000)
        )
        report: dict[str, Any] = {
            "tiers": {tier: bench_tier(tier, args.n, log) for tier in tiers},
            "bwrap": {"available": ok, "reason": why},
            "n": args.n,
            "cpus": os.cpu_count(),
        }
        log.close()
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for tier, figures in report["tiers"].items():
            print(tier)
            for key, value in figures.items():
                print(f"  {key:28} {value}")


if __name__ == "__main__":
    main()
