"""Where one gateway request's time goes: wall-clock milliseconds per stage.

``Stages.lap(name)`` charges the time since the previous lap to ``name`` (a stage that runs
several times, such as ``upstream`` in a recall loop, adds up). The web view starts the clock
when the request reaches it and sends the laps back in the ``Server-Timing`` header, so a
client, the bench and a browser's network panel all see the same split.

A streaming reply's headers are written on the event loop while the serving thread is still
taking laps, so the laps are read and written under a lock.
"""

from __future__ import annotations

import threading
import time

__all__ = ["Stages"]


class Stages:
    """Laps of one request, in the order they were first taken; see the module docstring."""

    def __init__(self, began: float | None = None) -> None:
        """``began``: a ``time.perf_counter()`` reading to count from (default: now)."""
        self._began = self._last = time.perf_counter() if began is None else began
        self.ms: dict[str, float] = {}
        self._lock = threading.Lock()

    def lap(self, name: str) -> None:
        with self._lock:
            now = time.perf_counter()
            self.ms[name] = self.ms.get(name, 0.0) + (now - self._last) * 1000
            self._last = now

    def total(self) -> float:
        """Milliseconds from the start to the last lap."""
        return (self._last - self._began) * 1000

    def snapshot(self) -> dict[str, float]:
        """The laps so far, copied: safe to read while another thread takes laps."""
        with self._lock:
            return dict(self.ms)

    def header(self) -> str:
        """The laps as a ``Server-Timing`` value (``name;dur=ms``, comma-separated)."""
        return ", ".join(f"{name};dur={ms:.2f}" for name, ms in self.snapshot().items())
