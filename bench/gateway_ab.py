"""The gateway's CPU per request, this checkout against another, everything a request costs
the server counted (its console threads' work after the answer too).

    python bench/gateway_ab.py --base /path/to/baseline-checkout [--json] [--rounds 3]
        [--requests 80] [--clients 1,8] [--cells new_plain,continuing_plain,...]
        [--servers daphne[,uvicorn]] [--settle 1.6]

Each arm is a server (``bench/_server``: daphne unless told) over the console of one
checkout (its code imported, its own temporary data folder), on one loopback upstream
(``bench/gateway.py``'s). A cell is ``_peer_cells``'s (new or continuing conversations, plain
or streamed) at a number of clients; each round times every arm once per cell, the arms'
order rotating, and after each timed cell waits ``--settle`` seconds, so the span sink's,
the recorder's and the live lint's work for those requests lands in the same window. The
figure is the server's process tree CPU (user + system) over the window, less its idle rate
(measured once, after a warm-up) over the window, per request: on a machine shared with
other work it holds far better than requests per second, which are reported too.

``--base`` is the baseline (a worktree of main, say); without it the bench times this
checkout under daphne and uvicorn (``--servers``, the first the baseline), which is what
``make bench`` runs. Figures: ``<cell>_c<clients>_<arm>_{cpu_ms_per_request,p50_ms,rps}``
and ``..._cpu_ratio`` (that arm's CPU per request over the baseline's); the envelope's
``details.readme_tables`` lays them out per cell for ``bench/readme_tables.py``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import REPO, emit, envelope
from _peer_cells import CONVERSATIONS, MODES, Arm, _cell, tree_cpu_seconds
from _server import SERVERS, DaphneServer, free_port
from gateway import Upstream

KEY_SCRIPT = (
    "import json\n"
    "from dashboard.gateway.models import GatewayKey\n"
    "from dashboard.runs.models import TuningProfile\n"
    "p = TuningProfile.objects.create(name='bench-wide', context_size=131072)\n"
    "print(json.dumps(GatewayKey.issue(agent_id='bench-wide', profile=p, "
    "upstream_base_url={url!r}, max_recall_steps=4)[1]))\n"
)


class CheckoutServer(DaphneServer):
    """``DaphneServer`` over the code of a checkout, which issues the bench's gateway key."""

    def key(self, upstream_url: str) -> str:
        self.migrate()
        out = self.manage("shell", "-c", KEY_SCRIPT.format(url=upstream_url))
        return str(json.loads(out.strip().splitlines()[-1]))


def _arm(name: str, server: CheckoutServer, key: str) -> Arm:
    def headers(session: str) -> dict[str, str]:
        return {"authorization": f"Bearer {key}", "x-scroll-session": session}

    return Arm(name, f"{server.base}/v1/chat/completions", headers, server.pid)


def run(arms: list[Arm], cells: list[tuple[str, str]], clients: list[int], requests: int,
        rounds: int, settle: float) -> dict[str, Any]:  # fmt: skip
    for arm in arms:  # warm: the first requests import and open what the rest reuse
        _cell(arm, "new", False, 1, 20, f"warm-{arm.name}")
    time.sleep(settle)
    idle = {}
    for arm in arms:
        before = tree_cpu_seconds(arm.pid)
        time.sleep(3.0)
        idle[arm.name] = (tree_cpu_seconds(arm.pid) - before) / 3.0
    samples: dict[str, dict[str, list[float]]] = {}
    for round_ in range(rounds):
        for (conversation, mode), count in ((c, n) for c in cells for n in clients):
            shift = round_ % len(arms)
            for arm in arms[shift:] + arms[:shift]:
                label = f"{arm.name}-{conversation}-{mode}-c{count}-r{round_}"
                cpu, began = tree_cpu_seconds(arm.pid), time.perf_counter()
                times, wall, _ = _cell(arm, conversation, mode == "stream", count,
                                       max(2, requests // count), label)  # fmt: skip
                time.sleep(settle)
                window = time.perf_counter() - began
                used = tree_cpu_seconds(arm.pid) - cpu - idle[arm.name] * window
                key = f"{conversation}_{mode}_c{count}_{arm.name}"
                got = samples.setdefault(key, {"cpu": [], "p50": [], "rps": []})
                got["cpu"].append(used * 1000 / len(times))
                got["p50"].append(statistics.median(times))
                got["rps"].append(len(times) / wall)
    out: dict[str, Any] = {f"idle_cpu_ms_per_s_{k}": v * 1000 for k, v in idle.items()}
    for key, got in samples.items():
        out[f"{key}_cpu_ms_per_request"] = statistics.mean(got["cpu"])
        out[f"{key}_p50_ms"] = statistics.median(got["p50"])
        out[f"{key}_rps"] = statistics.mean(got["rps"])
    base = arms[0].name
    for key in list(out):
        if key.endswith(f"_{base}_cpu_ms_per_request"):
            cell = key.removesuffix(f"_{base}_cpu_ms_per_request")
            for arm in arms[1:]:
                mine = out[f"{cell}_{arm.name}_cpu_ms_per_request"]
                out[f"{cell}_{arm.name}_cpu_ratio"] = mine / out[key]
    out["rounds"], out["requests_per_cell"] = rounds, requests
    cells_timed = sorted({key.removesuffix(f"_{base}_cpu_ms_per_request") for key in out
                          if key.endswith(f"_{base}_cpu_ms_per_request")})  # fmt: skip
    columns = [f"{arm.name}_cpu_ms_per_request" for arm in arms]
    columns += [f"{arm.name}_cpu_ratio" for arm in arms[1:]]
    columns += [f"{arm.name}_rps" for arm in arms]
    against = " against ".join(arm.name for arm in arms[::-1])
    out["readme_tables"] = [{
        "title": f"CPU ms per request and requests per second, {against}",
        "rows": cells_timed, "columns": columns, "key": "{row}_{column}",
    }]  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", type=Path, help="the baseline checkout (a worktree of main)")
    parser.add_argument(
        "--servers", default=None, help=f"among {', '.join(SERVERS)} (default: daphne with "
        "--base, else daphne,uvicorn)",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--out", type=Path, default=None, help="write the JSON envelope here")
    parser.add_argument("--cells", default=",".join(f"{c}_{m}" for c in CONVERSATIONS
                                                    for m in MODES))  # fmt: skip
    parser.add_argument("--clients", default="1,8")
    parser.add_argument("--requests", type=int, default=80)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--settle", type=float, default=1.6)
    args = parser.parse_args(argv)
    named = args.servers or ("daphne" if args.base is not None else ",".join(SERVERS))
    servers = [s.strip() for s in named.split(",") if s.strip()]
    if not servers or any(s not in SERVERS for s in servers):
        parser.error(f"--servers takes names among {', '.join(SERVERS)}")
    if (args.base is not None) == (len(servers) > 1):
        parser.error("give --base (this checkout against it) or two --servers, not both")
    if args.base is not None and not (args.base / "manage.py").is_file():
        parser.error(f"--base {args.base}: no manage.py there (not a checkout of Scroll)")
    cells = [tuple(c.split("_", 1)) for c in args.cells.split(",") if c.strip()]
    if any(len(c) != 2 or c[0] not in CONVERSATIONS or c[1] not in MODES for c in cells):
        parser.error(
            f"--cells: conversation_mode, conversation in {CONVERSATIONS}, mode in {MODES}"
        )
    try:
        clients = [int(c) for c in args.clients.split(",") if c.strip()]
    except ValueError:
        parser.error("--clients: comma-separated integers")
    if not clients or min(clients) < 1 or args.requests < 2 or args.rounds < 1 or args.settle < 0:
        parser.error("--clients >= 1, --requests >= 2, --rounds >= 1 and --settle >= 0")
    if args.base is not None:
        plan = [("base", args.base.resolve(), servers[0]), ("this", REPO, servers[0])]
    else:
        plan = [(name, REPO, name) for name in servers]
    folder = Path(tempfile.mkdtemp(prefix="scroll-bench-gateway-ab-"))
    upstream = Upstream()
    running: list[CheckoutServer] = []
    try:
        arms = []
        for name, checkout, server in plan:
            started = CheckoutServer(folder / name, free_port(), server=server, checkout=checkout)
            running.append(started)
            key = started.key(upstream.url)
            started.start(60.0)
            arms.append(_arm(name, started, key))
        pairs = [(c[0], c[1]) for c in cells]
        result = run(arms, pairs, clients, args.requests, args.rounds, args.settle)
    finally:
        for started in running:
            started.stop()
        upstream.close()
        shutil.rmtree(folder, ignore_errors=True)
    result["arms"] = ",".join(f"{name}={checkout}:{server}" for name, checkout, server in plan)
    emit(result, args.json)
    if args.json and args.out is not None:
        args.out.write_text(json.dumps(envelope(result), indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
