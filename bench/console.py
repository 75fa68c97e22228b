"""Console benchmark: span-to-browser latency through the real server.

    python bench/console.py --json [--quick] [--sessions 20 --rate 50 --clients 100 --seconds 20]

Starts daphne on 127.0.0.1 in a subprocess over a temporary data folder (migrated, with a
staff user the bench creates and logs in through the login form), opens ``--clients``
authenticated WebSockets spread round-robin over the ``--sessions`` session pages
(``/ws/sessions/<id>/``), then asks the server (``/bench/load/``, routed only because the
bench starts it with ``SCROLL_BENCH=1``) to emit ``--rate`` spans/s for each session for
``--seconds``. The spans go through the same pipeline an agent's do: telemetry span -> the
console span sink -> SQLite -> Channels groups -> the consumers -> the sockets.

The same run then measures, on the same server and the same sockets, a baseline (``mode``
``channels``: each span one plain ``group_send`` of a ready-made row that the consumer writes
as is: the fan-out through Channels with no Scroll code on the way) and the Scroll path again
while one busy-looping process per core (started and killed by this bench, each also ending
by itself) loads the machine (``--no-loaded`` skips it).

Latency is the client's receive time minus the span's end time (``data-end-ns`` on the row;
same host, same clock). ``dropped`` counts spans a client should have seen (every span of its
session while it was connected) but never received, after a grace period. Everything is
bounded: the server gets ``--startup-timeout`` to listen, the load ``--seconds`` plus
``--grace``, and the server is stopped at the end whatever happened.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from http.cookiejar import CookieJar
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import cpu_seconds, emit, percentile
from _server import DaphneServer, free_port

USER, PASSWORD = "bench", "bench-pw-7f3a9c"
SPAN_ID = re.compile(r'id="span-([0-9a-f]+)"[^>]*data-end-ns="(\d+)" data-name="bench\.span"')


def _session_safe_id(session_id: str) -> str:
    import hashlib

    return hashlib.sha1(session_id.encode("utf-8")).hexdigest()[:16]


class Server(DaphneServer):
    """daphne serving dashboard.asgi over a temporary data folder, with a superuser."""

    def __init__(self, data_dir: Path, port: int) -> None:
        super().__init__(data_dir, port, {"SCROLL_BENCH": "1"})

    def prepare(self) -> None:
        self.migrate()
        create = (
            "from django.contrib.auth import get_user_model as g; "
            f"g().objects.create_superuser({USER!r}, 'bench@example.invalid', {PASSWORD!r})"
        )
        self.manage("shell", "-c", create, timeout=60)


class Http:
    """A logged-in HTTP client (the login form, then Django's session cookie)."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.jar = CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))

    def cookie(self, name: str) -> str:
        return next((c.value or "" for c in self.jar if c.name == name), "")

    def request(self, path: str, data: dict[str, Any] | None = None) -> Any:
        body = urllib.parse.urlencode(data).encode() if data is not None else None
        req = urllib.request.Request(self.base + path, data=body)
        if body is not None:
            req.add_header("X-CSRFToken", self.cookie("csrftoken"))
            req.add_header("Referer", self.base + path)
        with self.opener.open(req, timeout=30) as response:
            return response.status, response.geturl(), response.read()

    def login(self) -> None:
        self.request("/login/")
        form = {
            "username": USER,
            "password": PASSWORD,
            "csrfmiddlewaretoken": self.cookie("csrftoken"),
        }
        _, url, _ = self.request("/login/", form)
        if "/login/" in url or not self.cookie("sessionid"):
            raise RuntimeError("logging in through the login form failed")

    def json(self, path: str, data: dict[str, Any] | None = None) -> dict[str, Any]:
        return json.loads(self.request(path, data)[2])


class Client:
    """One WebSocket on a session page, recording when each bench span arrives."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.reset()

    def reset(self) -> None:
        self.seen: set[str] = set()
        self.latencies_ms: list[float] = []
        self.ends_ns: list[int] = []
        self.duplicates = 0

    async def run(self, url: str, headers: dict[str, str], ready: asyncio.Event, stop: Any) -> None:
        from websockets.asyncio.client import connect

        async with connect(url, additional_headers=headers, max_size=None, open_timeout=30) as ws:
            ready.set()
            while not stop.is_set():
                try:
                    frame = await asyncio.wait_for(ws.recv(), timeout=0.25)
                except TimeoutError:
                    continue
                now = time.time_ns()
                for span_id, end_ns in SPAN_ID.findall(frame):
                    if span_id in self.seen:
                        self.duplicates += 1
                        continue
                    self.seen.add(span_id)
                    self.latencies_ms.append((now - int(end_ns)) / 1e6)
                    self.ends_ns.append(int(end_ns))


def start_burner(seconds: float) -> list[subprocess.Popen[bytes]]:
    """One busy-looping process per core, each ending by itself after ``seconds``."""
    spin = f"import time\nend = time.monotonic() + {seconds!r}\nwhile time.monotonic() < end: pass"
    return [
        subprocess.Popen([sys.executable, "-c", spin], stdin=subprocess.DEVNULL)
        for _ in range(os.cpu_count() or 1)
    ]


def stop_burner(burners: list[subprocess.Popen[bytes]]) -> None:
    for proc in burners:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


async def phase(
    args: argparse.Namespace, http: Http, clients: list[Client], mode: str, server_pid: int
) -> dict[str, Any]:
    """One load through the server in ``mode`` to the already connected clients."""
    for client in clients:
        client.reset()
    cpu_before = cpu_seconds(server_pid)
    load = await asyncio.to_thread(
        http.json,
        "/bench/load/",
        {"sessions": args.sessions, "rate": args.rate, "seconds": args.seconds, "mode": mode},
    )
    if load.get("error") or "id" not in load:
        raise RuntimeError(f"the server refused the load: {load.get('error')}")
    deadline = time.monotonic() + args.seconds + args.grace + 30
    while True:
        await asyncio.sleep(0.5)
        status = await asyncio.to_thread(http.json, f"/bench/load/{load['id']}/")
        if status["done"] or time.monotonic() > deadline:
            break
    if status["error"]:
        raise RuntimeError(f"the load failed in the server: {status['error']}")
    expected = status["counts"]
    # Spans still in flight: wait until every client has every span, or the grace is over.
    grace_end = time.monotonic() + args.grace
    while time.monotonic() < grace_end:
        if all(len(c.seen) >= expected.get(c.session_id, 0) for c in clients):
            break
        await asyncio.sleep(0.1)
    # The server's CPU (every thread: the load, the sink, the event loop) per span: what a
    # span costs whoever else shares the cores, which latency on a busy machine hides.
    cpu_s = cpu_seconds(server_pid) - cpu_before
    latencies = [ms for c in clients for ms in c.latencies_ms]
    # Latency by when the span ended, first half of the load against the second: equal when
    # the server keeps up, growing when a backlog builds (latency then depends on run length).
    timed = sorted(
        (end, ms) for c in clients for end, ms in zip(c.ends_ns, c.latencies_ms, strict=True)
    )
    half = len(timed) // 2
    first_half = [ms for _, ms in timed[:half]]
    second_half = [ms for _, ms in timed[half:]]
    should = sum(expected.get(c.session_id, 0) for c in clients)
    received = sum(len(c.seen) for c in clients)
    generated = sum(expected.values())
    elapsed = status["elapsed_s"] or args.seconds
    return {
        "span_to_client_p50_ms": round(percentile(latencies, 50), 2),
        "span_to_client_p95_ms": round(percentile(latencies, 95), 2),
        "span_to_client_p99_ms": round(percentile(latencies, 99), 2),
        "span_to_client_max_ms": round(max(latencies), 2) if latencies else float("nan"),
        "span_to_client_p95_ms_first_half": round(percentile(first_half, 95), 2),
        "span_to_client_p95_ms_second_half": round(percentile(second_half, 95), 2),
        "spans_per_s": round(generated / elapsed, 1),
        "server_cpu_ms_per_span": round(cpu_s * 1000 / generated, 3) if generated else None,
        "spans": generated,
        "spans_received": received,
        "deliveries_per_s": round(received / elapsed, 1),
        "dropped": should - received,
        "duplicates": sum(c.duplicates for c in clients),
        "sink": status.get("sink"),
    }


async def drive(args: argparse.Namespace, server: Server, http: Http) -> dict[str, Any]:
    sessions = [f"bench:s{i:03d}" for i in range(args.sessions)]
    headers = {
        "Cookie": f"sessionid={http.cookie('sessionid')}; csrftoken={http.cookie('csrftoken')}",
        "Origin": server.base,
    }
    clients = [Client(sessions[i % len(sessions)]) for i in range(args.clients)]
    stop = asyncio.Event()
    readies = [asyncio.Event() for _ in clients]
    ws_base = server.base.replace("http://", "ws://")
    tasks = [
        asyncio.create_task(
            c.run(f"{ws_base}/ws/sessions/{_session_safe_id(c.session_id)}/", headers, r, stop)
        )
        for c, r in zip(clients, readies, strict=True)
    ]
    try:
        await asyncio.wait_for(asyncio.gather(*(r.wait() for r in readies)), 60)
    except TimeoutError:
        failed = [t.exception() for t in tasks if t.done() and t.exception()]
        raise RuntimeError(f"clients did not all connect: {failed[:1]}") from None

    result: dict[str, Any] = {}
    try:
        # Same server, same sockets: Scroll's live path, the plain-channels baseline, then
        # Scroll's path again with every core kept busy by a burner this bench starts.
        result["scroll"] = await phase(args, http, clients, "scroll", server.pid)
        result["baseline"] = await phase(args, http, clients, "channels", server.pid)
        if not args.no_loaded:
            burners = start_burner(args.seconds + args.grace + 60)
            try:
                result["loaded"] = await phase(args, http, clients, "scroll", server.pid)
            finally:
                stop_burner(burners)
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
    result["config"] = {
        "sessions": args.sessions,
        "rate_per_session": args.rate,
        "seconds": args.seconds,
        "clients": args.clients,
        "grace_s": args.grace,
        "server": "daphne (subprocess, 127.0.0.1), in-memory channel layer, SQLite",
        "clients_per_session": round(args.clients / args.sessions, 2),
        "burner_processes": os.cpu_count() or 1,
    }
    result["baseline"].pop("sink", None)  # the sink saw none of the baseline's messages
    p95 = "span_to_client_p95_ms"
    result["p95_over_baseline_ratio"] = round(result["scroll"][p95] / result["baseline"][p95], 2)
    cpu = "server_cpu_ms_per_span"
    result["server_cpu_over_baseline_ratio"] = round(
        result["scroll"][cpu] / result["baseline"][cpu], 2
    )
    if "loaded" in result:
        loaded, idle = result["loaded"][p95], result["scroll"][p95]
        result["loaded_p95_over_idle_ratio"] = round(loaded / idle, 2)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--rate", type=float, default=50.0, help="spans/s per session")
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--grace", type=float, default=10.0, help="wait for late spans (s)")
    parser.add_argument("--startup-timeout", type=float, default=30.0)
    parser.add_argument("--quick", action="store_true", help="4 sessions, 20 clients, 3 s")
    parser.add_argument("--keep", action="store_true", help="keep the temporary data folder")
    parser.add_argument("--no-loaded", action="store_true", help="skip the run under CPU load")
    args = parser.parse_args(argv)
    if args.quick:
        args.sessions, args.rate, args.clients, args.seconds = 4, 20.0, 20, 3.0
    if args.sessions < 1 or args.clients < 1 or args.rate <= 0 or args.seconds <= 0:
        parser.error("sessions, clients, rate and seconds must be positive")
    try:
        import websockets  # noqa: F401
    except ImportError:
        parser.error("the websockets package is needed: pip install -e '.[dev]'")

    data_dir = Path(tempfile.mkdtemp(prefix="scroll-bench-console-"))
    server = Server(data_dir, free_port())
    try:
        server.prepare()
        server.start(args.startup_timeout)
        http = Http(server.base)
        http.login()
        result = asyncio.run(drive(args, server, http))
    finally:
        server.stop()
        if args.keep:
            print(f"data kept in {data_dir}", file=sys.stderr)
        else:
            shutil.rmtree(data_dir, ignore_errors=True)
    emit(result, args.json, quick=args.quick)
    dropped = sum(result[p]["dropped"] for p in ("scroll", "baseline", "loaded") if p in result)
    return 0 if dropped == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
