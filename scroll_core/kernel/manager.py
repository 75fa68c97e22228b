"""One kernel per live session, a small warm pool, idle reaping and a clean exit.

A new session takes a kernel the pool started in advance (so it does not wait for a cold
start); the pool is refilled in the background. Kernels idle longer than ``idle_timeout_s``
are closed. At host exit every child is shut down; if the host is killed outright the
children notice their pipe closing (and bwrap's ``--die-with-parent``) and exit too.
Releasing a session or shutting down answers in bounded time even while cells are stuck:
``Kernel.close`` kills a busy kernel before it waits for the cell to let go.
"""

from __future__ import annotations

import atexit
import contextlib
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import KernelError
from .client import Kernel, KernelStatus
from .config import KernelConfig

__all__ = ["KernelManager"]


class KernelManager:
    """Hands out one kernel per session id; see the module docstring."""

    def __init__(
        self,
        config: KernelConfig | None = None,
        *,
        pool_size: int = 2,
        idle_timeout_s: float = 900.0,
    ) -> None:
        self.config = config or KernelConfig.from_env()
        self.pool_size = max(0, pool_size)
        self.idle_timeout_s = idle_timeout_s
        self._lock = threading.Lock()
        self._sessions: dict[str, Kernel] = {}
        self._pool: list[Kernel] = []
        self._closed = False
        self._wake = threading.Event()
        self.tier = Kernel.resolve(self.config)
        self._filler = threading.Thread(target=self._maintain, name="scroll-pool", daemon=True)
        self._filler.start()
        atexit.register(self.shutdown)

    def get(
        self, session_id: str, host_functions: Mapping[str, Callable[..., Any]] | None = None
    ) -> Kernel:
        """The session's kernel, taken from the warm pool the first time."""
        with self._lock:
            if self._closed:
                raise KernelError("kernel manager is shut down")
            kernel = self._sessions.get(session_id)
            if kernel is None:
                kernel = self._pool.pop() if self._pool else None
        if kernel is None:
            kernel = Kernel(self.config, sandbox=self.tier)
        if host_functions:
            kernel.register(host_functions)
        with self._lock:
            existing = self._sessions.setdefault(session_id, kernel)
        if existing is not kernel:
            kernel.close()
        self._wake.set()
        return existing

    def release(self, session_id: str) -> None:
        """Close the session's kernel (its variables are gone)."""
        with self._lock:
            kernel = self._sessions.pop(session_id, None)
        if kernel is not None:
            kernel.close()

    def reap_idle(self, now: float | None = None) -> list[str]:
        """Close kernels idle past the timeout; return their session ids."""
        now = time.monotonic() if now is None else now
        with self._lock:
            idle = [
                sid
                for sid, k in self._sessions.items()
                if now - k.last_used > self.idle_timeout_s and not k.busy
            ]
            kernels = [self._sessions.pop(sid) for sid in idle]
        for kernel in kernels:
            kernel.close()
        return idle

    def status(self) -> dict[str, Any]:
        with self._lock:
            sessions: dict[str, KernelStatus] = {
                sid: k.status() for sid, k in self._sessions.items()
            }
            warm = len(self._pool)
        return {"tier": self.tier, "warm": warm, "sessions": sessions}

    def warm_count(self) -> int:
        with self._lock:
            return len(self._pool)

    def wait_warm(self, timeout: float = 10.0) -> bool:
        """Block until the pool is full (for tests and benchmarks)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.warm_count() >= self.pool_size:
                return True
            time.sleep(0.01)
        return False

    def shutdown(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            kernels = list(self._sessions.values()) + self._pool
            self._sessions.clear()
            self._pool.clear()
        self._wake.set()
        # In parallel: each close is bounded, but a host with many stuck kernels should
        # not wait for them one after another.
        closers = [threading.Thread(target=_close_quietly, args=(k,)) for k in kernels]
        for closer in closers:
            closer.start()
        for closer in closers:
            closer.join()
        with contextlib.suppress(Exception):
            atexit.unregister(self.shutdown)

    def __enter__(self) -> KernelManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def _maintain(self) -> None:
        while True:
            with self._lock:
                if self._closed:
                    return
                missing = self.pool_size - len(self._pool)
            if missing > 0:
                try:
                    kernel = Kernel(self.config, sandbox=self.tier)
                except KernelError:
                    self._wake.wait(5.0)
                    self._wake.clear()
                    continue
                with self._lock:
                    if self._closed:
                        kernel.close()
                        return
                    self._pool.append(kernel)
                continue
            self._wake.wait(min(30.0, self.idle_timeout_s / 2))
            self._wake.clear()
            self.reap_idle()


def _close_quietly(kernel: Kernel) -> None:
    with contextlib.suppress(Exception):
        kernel.close()
