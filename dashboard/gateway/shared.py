"""What the gateway's web processes agree on: each key's rate limit and token budget, and
which process owns each gateway session (its conversation and its kernel).

One web process (``SCROLL_PROCESSES=1`` without Redis; the settings refuse several without
it) keeps all of it in memory: ``LocalLimits``. Behind several web processes the settings
require ``SCROLL_REDIS_URL``, and ``RedisLimits`` keeps it there: every request makes one
round trip, a Lua script that in one atomic step

- refuses the key if the tokens it spent (a Redis counter, seeded from the console's
  ``GatewayKey.tokens_used``) reached its budget;
- refuses it if it made ``rate_limit_per_minute`` requests in the last 60 s (a sorted set
  of request times on Redis's clock: a sliding window, exact across processes);
- else takes the session's lease (``owner`` with a time to live, as a run worker's lease)
  and answers who held it before.

A process serves a session from memory only while the lease was its own; otherwise it
rebuilds the conversation from the Event Log with a new, empty kernel (the log loses
nothing: the recall history is in it). The previous owner finds it lost the lease at its
next heartbeat (``renew``) and shuts its kernel down.

Tokens are added after each reply (``spend``), so a budget can be overrun by what the
requests already admitted when it ran out go on to spend, in all processes together; no
request is admitted once the count reached the budget. A request admitted and then refused
(the session is a run worker's) gives its slot of the window back and drops the lease in one
call (``refund``): a refusal costs the key nothing.

Two requests of one session are served one after the other, whichever processes they reach:
before it is admitted a request holds the session (``hold``), across processes a Redis lock
with a token only its holder can release (redis-py's ``Lock``), kept alive by the heartbeat
(``keep``) while a long request runs and expiring with the lease if its process dies. One
web process needs no lock here: the service's own per-session lock serialises them.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = [
    "Admission",
    "LimitRefused",
    "Limits",
    "LocalLimits",
    "RedisLimits",
    "SessionBusy",
    "limits_for",
]

WINDOW_S = 60.0


@dataclass
class LimitRefused(Exception):
    """Over the rate limit or the token budget: ``message`` says which."""

    message: str

    def __str__(self) -> str:
        return self.message


@dataclass
class SessionBusy(Exception):
    """Another request of the session held it for longer than the wait."""

    session_id: str
    waited_s: float

    def __str__(self) -> str:
        return (
            f"session {self.session_id!r} is serving another request (waited "
            f"{self.waited_s:g} s); retry when it has finished"
        )


@dataclass(frozen=True)
class Admission:
    """An admitted request; ``previous`` is who held the session's lease before it ("" none,
    this process's own ``owner`` when it kept it); ``slot`` names its entry in the key's rate
    window ("" when the key has no rate limit), for ``refund``."""

    previous: str
    slot: str = ""


class Limits(Protocol):
    owner: str

    def admit(
        self, key_id: int, rate: int, budget: int, spent: int, session_id: str
    ) -> Admission: ...

    def refund(self, key_id: int, admission: Admission, session_id: str) -> None: ...

    def hold(self, session_id: str, wait_s: float) -> Any: ...

    def keep(self, holds: list[Any]) -> None: ...

    def unhold(self, hold: Any) -> None: ...

    def spend(self, key_id: int, tokens: int) -> None: ...

    def renew(self, session_ids: list[str]) -> list[str]: ...

    def release(self, session_id: str) -> None: ...

    def owns(self, session_id: str) -> bool:
        """Whether this process holds ``session_id``'s lease now."""
        ...

    def forget_key(self, key_id: int) -> None: ...

    def close(self) -> None: ...


def _over_budget(budget: int) -> LimitRefused:
    return LimitRefused(f"this key spent its token budget ({budget:,} upstream tokens)")


def _over_rate(rate: int) -> LimitRefused:
    return LimitRefused(f"rate limit: {rate} requests per minute")


class LocalLimits:
    """Counts and leases in this process's memory (one web process serves every request)."""

    def __init__(self, owner: str) -> None:
        self.owner = owner
        self._lock = threading.Lock()
        self._calls: dict[int, deque[tuple[float, int]]] = {}
        self._spent: dict[int, int] = {}
        self._held: set[str] = set()
        self._slots = itertools.count()

    def admit(self, key_id: int, rate: int, budget: int, spent: int, session_id: str) -> Admission:
        now = time.monotonic()
        slot = ""
        with self._lock:
            # The console's count lags this process's by the recorder's batch.
            total = self._spent[key_id] = max(spent, self._spent.get(key_id, 0))
            if budget and total >= budget:
                raise _over_budget(budget)
            if rate:
                window = self._calls.setdefault(key_id, deque())
                while window and now - window[0][0] >= WINDOW_S:
                    window.popleft()
                if len(window) >= rate:
                    raise _over_rate(rate)
                entry = (now, next(self._slots))
                window.append(entry)
                slot = str(entry[1])
            previous = self.owner if session_id in self._held else ""
            self._held.add(session_id)
        return Admission(previous, slot)

    def refund(self, key_id: int, admission: Admission, session_id: str) -> None:
        with self._lock:
            window = self._calls.get(key_id)
            if admission.slot and window is not None:
                n = int(admission.slot)
                for entry in [e for e in window if e[1] == n]:
                    window.remove(entry)
            self._held.discard(session_id)

    def hold(self, session_id: str, wait_s: float) -> Any:
        return None  # one process: the service's per-session lock is enough

    def keep(self, holds: list[Any]) -> None:
        pass

    def unhold(self, hold: Any) -> None:
        pass

    def owns(self, session_id: str) -> bool:
        with self._lock:
            return session_id in self._held

    def spend(self, key_id: int, tokens: int) -> None:
        with self._lock:
            self._spent[key_id] = self._spent.get(key_id, 0) + tokens

    def renew(self, session_ids: list[str]) -> list[str]:
        return []

    def release(self, session_id: str) -> None:
        with self._lock:
            self._held.discard(session_id)

    def forget_key(self, key_id: int) -> None:
        with self._lock:
            self._spent.pop(key_id, None)

    def close(self) -> None:
        pass


# KEYS: rate set, token counter, lease. ARGV: rate, budget, spent (seed), owner, lease ms,
# a member name unique to this request. Redis's own clock: every process agrees on it.
_ADMIT = """
local rate = tonumber(ARGV[1])
local budget = tonumber(ARGV[2])
if budget > 0 then
  redis.call('SET', KEYS[2], ARGV[3], 'NX')
  local spent = tonumber(redis.call('GET', KEYS[2]))
  if spent >= budget then return {1, ''} end
end
if rate > 0 then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - 60000)
  if redis.call('ZCARD', KEYS[1]) >= rate then return {2, ''} end
  redis.call('ZADD', KEYS[1], now, ARGV[6])
  redis.call('PEXPIRE', KEYS[1], 61000)
end
local previous = redis.call('GET', KEYS[3])
redis.call('SET', KEYS[3], ARGV[4], 'PX', ARGV[5])
if rate > 0 then return {0, previous or '', ARGV[6]} end
return {0, previous or '', ''}
"""

# KEYS: leases. ARGV: owner, lease ms. Renews those still this owner's; returns the others.
_RENEW = """
local lost = {}
for i, key in ipairs(KEYS) do
  if redis.call('GET', key) == ARGV[1] then
    redis.call('PEXPIRE', key, ARGV[2])
  else
    table.insert(lost, i)
  end
end
return lost
"""

# KEYS: the token counter. ARGV: tokens. Only a seeded count moves (see ``admit``).
_SPEND = """
if redis.call('EXISTS', KEYS[1]) == 1 then return redis.call('INCRBY', KEYS[1], ARGV[1]) end
return 0
"""

# KEYS: rate set, lease. ARGV: the request's member in the set ("" none), owner.
_REFUND = """
if ARGV[1] ~= '' then redis.call('ZREM', KEYS[1], ARGV[1]) end
if redis.call('GET', KEYS[2]) == ARGV[2] then redis.call('DEL', KEYS[2]) end
return 0
"""

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class RedisLimits:
    """Counts and leases in Redis, shared by every web process (see the module docstring)."""

    def __init__(self, url: str, owner: str, lease_s: float, namespace: str = "") -> None:
        import redis

        # Key ids and session names are the console database's: deployments (or test runs)
        # sharing one Redis keep apart by naming theirs.
        self.prefix = f"scroll:gateway:{namespace}:" if namespace else "scroll:gateway:"
        self.owner = owner
        self.lease_ms = max(1, int(lease_s * 1000))
        self._redis = redis.Redis.from_url(url, decode_responses=True)
        self._admit = self._redis.register_script(_ADMIT)
        self._renew = self._redis.register_script(_RENEW)
        self._release = self._redis.register_script(_RELEASE)
        self._spend = self._redis.register_script(_SPEND)
        self._refund = self._redis.register_script(_REFUND)
        self._ids = itertools.count()
        self.lease_s = lease_s

    def _key(self, kind: str, name: object) -> str:
        return f"{self.prefix}{kind}:{name}"

    def admit(self, key_id: int, rate: int, budget: int, spent: int, session_id: str) -> Admission:
        keys = [self._key("rate", key_id), self._key("tokens", key_id), self._lease(session_id)]
        member = f"{self.owner}:{next(self._ids)}"
        args: list[int | str] = [rate, budget, spent, self.owner, self.lease_ms, member]
        verdict, previous, *slot = self._admit(keys=keys, args=args)
        if verdict == 1:
            raise _over_budget(budget)
        if verdict == 2:
            raise _over_rate(rate)
        return Admission(str(previous), str(slot[0]) if slot else "")

    def refund(self, key_id: int, admission: Admission, session_id: str) -> None:
        """Take back an admitted request that was then refused: its slot of the rate window
        and the session's lease, in one call."""
        self._refund(keys=[self._key("rate", key_id), self._lease(session_id)],
                     args=[admission.slot, self.owner])  # fmt: skip

    def hold(self, session_id: str, wait_s: float) -> Any:
        """Hold the session for one request, waiting up to ``wait_s`` for the request holding
        it (at any process) to finish: the lock to pass to ``unhold``, or ``SessionBusy``.
        The lock lives a lease; the heartbeat extends it (``keep``) while the request runs."""
        lock = self._redis.lock(
            self._key("busy", session_id), timeout=self.lease_s, sleep=0.01, thread_local=False
        )
        if lock.acquire(blocking=False):
            return lock
        if wait_s > 0 and lock.acquire(blocking=True, blocking_timeout=wait_s):
            return lock
        raise SessionBusy(session_id, wait_s)

    def keep(self, holds: list[Any]) -> None:
        for lock in holds:
            with contextlib.suppress(redis_lock_errors()):
                lock.reacquire()

    def unhold(self, hold: Any) -> None:
        """Let the next request of the session in (a no-op if the lock expired meanwhile)."""
        if hold is not None:
            with contextlib.suppress(redis_lock_errors()):
                hold.release()

    def _lease(self, session_id: str) -> str:
        return self._key("lease", session_id)

    def spend(self, key_id: int, tokens: int) -> None:
        if tokens:
            self._spend(keys=[self._key("tokens", key_id)], args=[tokens])

    def renew(self, session_ids: list[str]) -> list[str]:
        if not session_ids:
            return []
        lost = self._renew(keys=[self._lease(s) for s in session_ids],
                           args=[self.owner, self.lease_ms])  # fmt: skip
        return [session_ids[int(i) - 1] for i in lost]

    def release(self, session_id: str) -> None:
        self._release(keys=[self._lease(session_id)], args=[self.owner])

    def owns(self, session_id: str) -> bool:
        return bool(self._redis.get(self._lease(session_id)) == self.owner)

    def forget_key(self, key_id: int) -> None:
        """The key was saved in admin: seed its count from the console again (an operator
        may have reset it)."""
        self._redis.delete(self._key("tokens", key_id))

    def close(self) -> None:
        self._redis.close()


def redis_lock_errors() -> type[Exception]:
    from redis.exceptions import LockError

    return LockError


def limits_for(redis_url: str, owner: str, lease_s: float, namespace: str = "") -> Any:
    """``RedisLimits`` when the deployment has Redis, else ``LocalLimits``."""
    if redis_url:
        return RedisLimits(redis_url, owner, lease_s, namespace)
    return LocalLimits(owner)
