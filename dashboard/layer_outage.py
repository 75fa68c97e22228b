"""The channel layer going away (Redis stopped or restarting), told from other failures, and
this process's account of it: one warning when it starts, one line when it ends.

Live pushes are a convenience over the database, which holds everything a page shows: a
page whose layer is down says "live updates paused" and re-renders what it shows when the
layer is back (``dashboard.console.consumers``). So while the layer is down a sender does
not wait on it or log each refused message (a busy worker made hundreds of tracebacks in a
10 s outage): it drops the message, and tries the layer again at most every
``PROBE_EVERY_S``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time

__all__ = ["LAYER_DOWN_ERRORS", "LayerDown", "LayerOutage", "layer_outage", "redis_unreachable"]

log = logging.getLogger("dashboard.layer")

try:  # redis-py comes with the "redis" extra (channels-redis)
    from redis.exceptions import ConnectionError as _RedisConnectionError
    from redis.exceptions import TimeoutError as _RedisTimeoutError

    _REDIS_ERRORS: tuple[type[BaseException], ...] = (_RedisConnectionError, _RedisTimeoutError)
except ImportError:  # pragma: no cover - the embedded install has no Redis client
    _REDIS_ERRORS = ()

# What a layer that cannot be reached raises: redis-py's connection and timeout errors (its
# TimeoutError is not the builtin one), and the socket's own.
LAYER_DOWN_ERRORS: tuple[type[BaseException], ...] = (
    *_REDIS_ERRORS,
    OSError,
    asyncio.TimeoutError,
)


def redis_unreachable(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or an error it was raised from) is redis-py's connection or timeout
    error: Redis cannot be reached now (the gateway's shared limits, the channel layer)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if _REDIS_ERRORS and isinstance(exc, _REDIS_ERRORS):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


class LayerDown(ConnectionError):
    """A message dropped without trying the layer, known to be down."""

    def __str__(self) -> str:
        return "known to be down"


# While the layer is down, a sender tries it again at most this often (else drops at once).
PROBE_EVERY_S = 1.0


class LayerOutage:
    """Whether the layer is down for this process, since when, and what was dropped."""

    def __init__(self, probe_every_s: float = PROBE_EVERY_S) -> None:
        self.probe_every_s = probe_every_s
        self._lock = threading.Lock()
        self.down_since: float | None = None
        self._next_probe = 0.0
        self.dropped = 0  # messages not sent during the current (or last) outage
        self.outages = 0  # outages this process has seen

    @property
    def down(self) -> bool:
        return self.down_since is not None

    def should_try(self) -> bool:
        """False while the layer is down and the next probe is not due (drop the message)."""
        with self._lock:
            if self.down_since is None:
                return True
            now = time.monotonic()
            if now < self._next_probe:
                return False
            self._next_probe = now + self.probe_every_s
            return True

    def failed(self, exc: BaseException, dropped: int = 1) -> None:
        """The layer refused a call: the first failure of an outage logs one warning."""
        with self._lock:
            self.dropped += dropped
            if self.down_since is not None:
                return
            self.down_since = time.monotonic()
            self._next_probe = self.down_since + self.probe_every_s
            self.outages += 1
            self.dropped = dropped
        log.warning(
            "channel layer unreachable (%s: %s): live updates paused; pages catch up "
            "when it is back",
            type(exc).__name__,
            exc,
        )

    def answered(self) -> None:
        """A layer call went through: an outage, if any, is over (one line says so)."""
        if self.down_since is None:
            return
        with self._lock:
            since, self.down_since = self.down_since, None
            dropped = self.dropped
        if since is not None:
            log.info(
                "channel layer back after %.1f s: live updates resumed (%d messages were "
                "not sent meanwhile)",
                time.monotonic() - since,
                dropped,
            )


# The process's account (every sender in it shares the one layer).
layer_outage = LayerOutage()
