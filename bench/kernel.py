"""Kernel benchmark: round trips, ms overhead, start-up, memory, per tier; Jupyter beside it.

    python bench/kernel.py --json [--quick] [--n 500] [--starts 10]

Medians and p99 over ``--n`` runs. ``raw_pipe_roundtrip_p50_ms`` is a bare JSON-lines echo
child started the same way (``python -I -S``), so ``exec_overhead_ratio`` is what the kernel
adds on top of the pipe itself.

Start-up, three figures that answer different questions:

- ``pool_handover_ms``: taking an already started kernel off the manager's warm pool (no
  cell runs; this is what the pool saves, not a start);
- ``first_cell_warm_ms`` / ``first_cell_empty_ms``: a new session's first cell answered
  (``KernelManager.get`` plus the first empty ``execute`` returning) with the pool warm and
  with no pool (``pool_size=0``: the kernel starts on demand), alternating, ``--starts`` each;
- ``raw_pipe_first_reply_ms``: spawning the bare echo child and its first reply, so
  ``first_cell_empty_overhead_ratio`` is what a kernel start adds over a bare process start.

With the optional ``[bench]`` extra (``jupyter_client`` + ``ipykernel``) the same run starts a
local IPython kernel and times its empty cell (``jupyter.empty_cell_p50_ms``) and its start
(``jupyter.start_ms``) on this machine; without it the JSON says it was not measured.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import emit

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


def raw_pipe_first_reply() -> float:
    """Spawn the bare echo child and wait for its first reply (ms)."""
    began = time.perf_counter()
    proc = subprocess.Popen(
        [PYTHON, "-I", "-S", "-c", ECHO], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env={}
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b'{"op":"ping","id":1}\n')
    proc.stdin.flush()
    proc.stdout.readline()
    elapsed = (time.perf_counter() - began) * 1000
    proc.stdin.close()
    proc.wait()
    proc.stdout.close()
    return elapsed


def first_cells(config: KernelConfig, starts: int) -> tuple[list[float], list[float]]:
    """A new session's first cell answered, pool warm vs no pool, alternating (ms)."""
    warm: list[float] = []
    empty: list[float] = []
    with (
        KernelManager(config, pool_size=1) as pooled,
        KernelManager(config, pool_size=0) as unpooled,
    ):
        for i in range(starts):
            for manager, out in ((pooled, warm), (unpooled, empty)):
                if manager is pooled and not manager.wait_warm(30.0):
                    raise RuntimeError("the warm pool did not fill within 30 s")
                began = time.perf_counter()
                manager.get(f"s{i}").execute("")
                out.append((time.perf_counter() - began) * 1000)
                manager.release(f"s{i}")
    return warm, empty


def jupyter_empty_cells(client: Any, n: int) -> list[float]:
    def once() -> None:
        client.execute("", store_history=False)
        client.get_shell_msg(timeout=30)

    timed(once, 20)
    return timed(once, n)


def jupyter(n: int, starts: int) -> dict[str, Any]:
    """The same empty cell through a local IPython kernel (jupyter_client + ipykernel)."""
    try:
        from jupyter_client.manager import start_new_kernel
    except ImportError as exc:
        return {"not_measured": f"{exc.name} is not installed (pip install -e '.[bench]')"}
    start_ms: list[float] = []
    samples: list[float] = []
    for i in range(max(1, starts // 2)):
        began = time.perf_counter()
        km, kc = start_new_kernel(kernel_name="python3", startup_timeout=60)
        start_ms.append((time.perf_counter() - began) * 1000)
        try:
            if i == 0:
                samples = jupyter_empty_cells(kc, n)
        finally:
            kc.stop_channels()
            km.shutdown_kernel(now=True)
    return {
        "empty_cell_p50_ms": round(statistics.median(samples), 3),
        "empty_cell_p99_ms": round(pct(samples, 0.99), 3),
        "start_ms": round(statistics.median(start_ms), 1),
    }


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


def bench_tier(tier: str, n: int, starts: int, log: EventLog) -> dict[str, float]:
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
    raw_firsts = []
    for _ in range(starts):
        began = time.perf_counter()
        Kernel(config).close()
        colds.append((time.perf_counter() - began) * 1000)
        raw_firsts.append(raw_pipe_first_reply())
    handovers = []
    with KernelManager(config, pool_size=1) as manager:
        for i in range(starts):
            manager.wait_warm()
            began = time.perf_counter()
            manager.get(f"s{i}")
            handovers.append((time.perf_counter() - began) * 1000)
    first_warm, first_empty = first_cells(config, starts)
    raw = raw_pipe(n)
    raw_first = statistics.median(raw_firsts)
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
        "pool_handover_ms": round(statistics.median(handovers), 3),
        "first_cell_warm_ms": round(statistics.median(first_warm), 2),
        "first_cell_empty_ms": round(statistics.median(first_empty), 2),
        "raw_pipe_first_reply_ms": round(raw_first, 2),
        "first_cell_empty_overhead_ratio": round(statistics.median(first_empty) / raw_first, 2),
        "kernel_rss_mb": round(rss, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--n", type=int, default=None, help="samples per round-trip figure")
    parser.add_argument("--starts", type=int, default=None, help="kernel starts per figure")
    parser.add_argument("--quick", action="store_true", help="--n 100 --starts 4")
    args = parser.parse_args()
    n = args.n or (100 if args.quick else 500)
    starts = args.starts or (4 if args.quick else 10)
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
            "tiers": {tier: bench_tier(tier, n, starts, log) for tier in tiers},
            "jupyter": jupyter(n, starts),
            "bwrap": {"available": ok, "reason": why},
            "n": n,
            "starts": starts,
        }
        log.close()
    if args.json:
        emit(report, True, quick=args.quick)
    else:
        for tier, figures in report["tiers"].items():
            print(tier)
            for key, value in figures.items():
                print(f"  {key:32} {value}")
        print("jupyter", report["jupyter"])


if __name__ == "__main__":
    main()
