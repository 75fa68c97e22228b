"""Span load for ``bench/console.py``: generated inside the server process, so the spans take
the same path as an agent's (``scroll_core.telemetry.span`` -> the console span sink ->
SQLite -> Channels groups -> the WebSocket consumers).

``mode="channels"`` is the bench's baseline: the same sessions, rate and clients, but each
span is one plain ``channel_layer.group_send`` of a ready-made row to the session's group,
which the consumer writes to its socket as is (``bench_frame``): no span, no sink, no SQLite,
no batching, no rendering.

Only reachable when the server was started with ``SCROLL_BENCH=1`` (the bench sets it), from
loopback, by staff (see ``dashboard.console.views.bench_load``). Bounded: at most ``MAX_SESSIONS``
sessions, ``MAX_RATE`` spans/s each and ``MAX_SECONDS`` seconds, one load at a time.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from scroll_core import telemetry

__all__ = ["BENCH_FRAME", "BENCH_SPAN", "MODES", "Load", "get_load", "start_load"]

BENCH_SPAN = "bench.span"
BENCH_FRAME = "bench.frame"  # the baseline's message type (SessionConsumer.bench_frame)
MODES = ("scroll", "channels")
MAX_SESSIONS = 200
MAX_RATE = 1000.0
MAX_SECONDS = 120.0
TICK_S = 0.005

_ids = itertools.count(1)
_lock = threading.Lock()
_loads: dict[int, Load] = {}


@dataclass
class Load:
    id: int
    sessions: list[str]
    rate: float
    seconds: float
    mode: str = "scroll"
    counts: dict[str, int] = field(default_factory=dict)
    started: float = 0.0
    ended: float = 0.0
    done: bool = False
    error: str = ""

    def run(self) -> None:
        try:
            self._run()
        except Exception as exc:  # reported to the bench, never raised into the server
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            self.ended = time.monotonic()
            self.done = True

    def _run(self) -> None:
        if self.mode == "channels":
            self._run_channels()
            return
        if not telemetry.enabled():
            raise RuntimeError("telemetry is not configured in this process (no span sink)")
        self.counts = dict.fromkeys(self.sessions, 0)
        self.started = time.monotonic()
        deadline = self.started + self.seconds
        while True:
            now = time.monotonic()
            if now >= deadline:
                break
            due = int((now - self.started) * self.rate)
            for session in self.sessions:
                while self.counts[session] < due:
                    self.counts[session] += 1
                    with telemetry.span(
                        BENCH_SPAN, session=session, load=self.id, n=self.counts[session]
                    ):
                        pass
            time.sleep(TICK_S)

    def _run_channels(self) -> None:
        """The baseline: the same pacing, each span one plain group_send on the server loop."""
        from asgiref.sync import async_to_sync
        from channels.layers import get_channel_layer

        from dashboard.groups import session_group
        from dashboard.push import server_loop

        layer = get_channel_layer()
        if layer is None:
            raise RuntimeError("no channel layer in this process")
        loop = server_loop()
        groups = {session: session_group(session) for session in self.sessions}
        self.counts = dict.fromkeys(self.sessions, 0)
        self.started = time.monotonic()
        deadline = self.started + self.seconds
        while True:
            now = time.monotonic()
            if now >= deadline:
                break
            due = int((now - self.started) * self.rate)
            sends = []
            for index, session in enumerate(self.sessions):
                while self.counts[session] < due:
                    self.counts[session] += 1
                    frame = (
                        f'<tr id="span-{self.id:04x}{index:04x}{self.counts[session]:08x}" '
                        f'data-end-ns="{time.time_ns()}" data-name="{BENCH_SPAN}"></tr>'
                    )
                    sends.append(
                        layer.group_send(groups[session], {"type": BENCH_FRAME, "html": frame})
                    )
            if sends and loop is not None:
                asyncio.run_coroutine_threadsafe(_gather(sends), loop).result(30)
            elif sends:  # no server here (a test): the same sends on a loop of our own
                async_to_sync(_gather)(sends)
            time.sleep(TICK_S)

    def to_dict(self) -> dict[str, Any]:
        elapsed = (self.ended or time.monotonic()) - self.started if self.started else 0.0
        return {
            "id": self.id,
            "done": self.done,
            "error": self.error,
            "sessions": self.sessions,
            "rate": self.rate,
            "seconds": self.seconds,
            "mode": self.mode,
            "elapsed_s": round(elapsed, 3),
            "counts": dict(self.counts),
        }


async def _gather(sends: list[Any]) -> None:
    await asyncio.gather(*sends)


def start_load(
    sessions: int, rate: float, seconds: float, prefix: str = "bench", mode: str = "scroll"
) -> Load:
    """Start generating ``rate`` spans/s for each of ``sessions`` sessions for ``seconds``."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}")
    if not 1 <= sessions <= MAX_SESSIONS:
        raise ValueError(f"sessions must be 1..{MAX_SESSIONS}")
    if not 0 < rate <= MAX_RATE:
        raise ValueError(f"rate must be in (0, {MAX_RATE:g}] spans/s")
    if not 0 < seconds <= MAX_SECONDS:
        raise ValueError(f"seconds must be in (0, {MAX_SECONDS:g}]")
    with _lock:
        if any(not load.done for load in _loads.values()):
            raise RuntimeError("a load is already running")
        load_id = next(_ids)
        names = [f"{prefix}:s{i:03d}" for i in range(sessions)]
        load = Load(load_id, names, rate, seconds, mode)
        _loads[load_id] = load
    threading.Thread(target=load.run, name=f"bench-load-{load_id}", daemon=True).start()
    return load


def get_load(load_id: int) -> Load | None:
    return _loads.get(load_id)
