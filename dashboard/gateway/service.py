"""Serving one gateway request, synchronously, in a worker thread of the ASGI server.

The service keeps, per process, the live ``GatewayConversation`` of each session (rebuilt
from the Event Log when a session is first served here, the least recently used dropped past
``MAX_CONVERSATIONS``) and one ``HttpUpstream`` per upstream. Rate limits, token budgets and
which process owns a session are kept by ``dashboard.gateway.shared`` (in memory, or in Redis
behind several web processes): a session is served from memory only while this process held
its lease; one taken over from another process is rebuilt from the Event Log with a new
kernel, and the heartbeat shuts down the kernels of sessions another process took. A session
a run worker holds is refused (409), and the refusal gives its slot of the key's rate window
back. The heartbeat also writes this process's gateway kernels to ``KernelState`` for the
Kernels page and tells a Kernels page open at that moment (channel group ``KERNELS``); a
request that ran a cell wakes it at once, so a kernel that starts shows without a refresh.

A session serves one request at a time. In this process a per-session lock orders them;
behind several processes the request also holds the session in Redis (``Limits.hold``)
before it is admitted, waiting at most ``SCROLL_GATEWAY_SESSION_WAIT_S``, else it is refused
with 409 and a ``Retry-After`` (the official clients retry a 409). The record of the sessions
this process holds is trimmed at every heartbeat: a session whose lease another process took,
or idle past ``SCROLL_GATEWAY_SESSION_IDLE_S``, loses its conversation (rebuilt from the log
if it comes back), its kernel (shut down) and its lease.

After every request the session's ``RunRecord`` (kind ``gateway``) and its compress records
are saved and pushed to the console, as the runner does for its runs - by the ``Recorder``'s
thread, in batches, so the client's answer never waits on the console's database
(``flush()`` waits for it).

Nothing on the request path reads the console's database once warm (but on taking a
session's lease, to check no run worker holds it): authenticated keys are
remembered for ``KEY_CACHE_S`` seconds and each profile for ``PROFILE_CACHE_S``; saving or
deleting a key or a profile drops them at once in this process, and other processes see the
change within those times.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from django.conf import settings
from django.db import close_old_connections, connections
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver
from django.utils import timezone

from dashboard.eventlog import get_event_log
from dashboard.gateway import stored_conversations, stored_responses
from dashboard.gateway.models import GatewayKey, hash_key
from dashboard.gateway.recorder import GATEWAY_KIND, IndexSnapshot, Job, Recorder
from dashboard.gateway.shared import LimitRefused, SessionBusy, limits_for
from dashboard.groups import KERNELS
from dashboard.layer_outage import redis_unreachable
from dashboard.outage import database_unavailable
from dashboard.projects.models import AgentOwner
from dashboard.push import send_group
from dashboard.runs.grants import readable_by
from dashboard.runs.models import KernelState, RunRecord, TuningProfile
from dashboard.runs.profiles import core_profile
from dashboard.runs.worker import PROCESS_TOKEN
from dashboard.runs.workstate import GATEWAY_OWNER_PREFIX
from scroll_core import telemetry, wire
from scroll_core.gateway import (
    ClientReply,
    ClientRequest,
    GatewayConversation,
    HttpUpstream,
    Stages,
    compaction,
    http_upstream,
)
from scroll_core.gateway.naming import check_session_header, session_id_for
from scroll_core.gateway.upstream import OnBlock, OnText
from scroll_core.kernel import KernelConfig, KernelManager
from scroll_core.profile import Profile

__all__ = [
    "GATEWAY_OWNER",
    "GatewayRefused",
    "GatewayService",
    "get_service",
    "reset_service",
    "session_id_for_request",
]

MAX_CONVERSATIONS = 256
# Who owns this process's gateway sessions (their leases, their KernelState rows).
GATEWAY_OWNER = GATEWAY_OWNER_PREFIX + PROCESS_TOKEN
KEY_CACHE_S = 5.0
PROFILE_CACHE_S = 2.0

T = TypeVar("T")
log = logging.getLogger("dashboard.gateway")


class Gate:
    """At most ``slots`` requests run the gateway's Python at once; a request gives its slot
    up while it waits on its upstream or a kernel (``released``).

    Dozens of threads all runnable at once make a convoy: the thread holding the Event
    Log's write lock needs the interpreter between statements and waits behind every other
    runnable thread each time, so every append queues behind the slowest. Capping the
    runnable threads near the number of cores keeps the lock holder moving; requests wait
    their turn at the gate instead, in order."""

    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError(f"the gate needs at least one slot, got {slots}")
        self._slots = threading.Semaphore(slots)

    def __enter__(self) -> Gate:
        self._slots.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self._slots.release()

    @contextmanager
    def released(self) -> Iterator[None]:
        self._slots.release()
        try:
            yield
        finally:
            self._slots.acquire()


@dataclass
class GatewayRefused(Exception):
    """The key may not make this request now (rate limit or token budget, the session held
    by a run worker or busy past the wait): HTTP ``status``, the error's ``code``, and when
    to try again (``retry_after`` seconds, 0 not said)."""

    status: int
    message: str
    code: str = ""
    retry_after: float = 0.0

    def __str__(self) -> str:
        return self.message


@dataclass
class _Session:
    """A session this process serves or served: its lock (one request at a time), how many
    requests wait for or hold it, when the last one ended, and its Redis hold while one runs."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    users: int = 0
    last_used: float = field(default_factory=time.monotonic)
    hold: Any = None


class GatewayService:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._conversations: OrderedDict[tuple[str, str], GatewayConversation] = OrderedDict()
        # The Event Logs those conversations are kept for (one, unless the log moved): a
        # session's conversations are found by key, not by a scan of all of them.
        self._locations: set[str] = set()
        self._upstreams: dict[tuple[str, str, str, float], HttpUpstream] = {}
        self._keys: dict[str, tuple[float, GatewayKey]] = {}
        self._profiles: dict[int | None, tuple[float, Profile]] = {}
        self.recorder = Recorder()
        self._serving = threading.Condition()  # in-flight requests (``flush`` waits for them)
        self._in_flight = 0
        self.gate = Gate(int(getattr(settings, "SCROLL_GATEWAY_CPU_SLOTS", 4)))
        self._kernels: KernelManager | None = None
        self.lease_s = float(getattr(settings, "SCROLL_WORKER_LEASE_S", 15.0))
        self.limits = limits_for(
            getattr(settings, "SCROLL_REDIS_URL", ""), GATEWAY_OWNER, self.lease_s,
            _console_namespace(),
        )  # fmt: skip
        self._sessions: dict[str, _Session] = {}
        self.session_wait_s = float(getattr(settings, "SCROLL_GATEWAY_SESSION_WAIT_S", 30.0))
        self.session_idle_s = float(getattr(settings, "SCROLL_GATEWAY_SESSION_IDLE_S", 900.0))
        # Seals remote compactions' handles (every web process sharing SECRET_KEY checks them).
        self.compaction_secret = compaction.derive_secret(settings.SECRET_KEY)
        self._written: dict[str, tuple[Any, ...]] = {}  # KernelState rows as last written
        self._halt = threading.Event()
        self._nudge = threading.Event()  # write the kernels now (a request ran a cell)
        self._beating = threading.Lock()  # one beat at a time (the thread's, or a test's)
        self._heart = threading.Thread(target=self._beat, name="gateway-heartbeat", daemon=True)
        self._heart.start()

    @property
    def kernels(self) -> KernelManager:
        """The gateway's own kernels: its sessions are served in this (web) process, not by a
        run worker, so their kernels live here too."""
        with self._lock:
            if self._kernels is None:
                pool = int(getattr(settings, "SCROLL_KERNEL_POOL", 1))
                self._kernels = KernelManager(KernelConfig.from_env(), pool_size=pool)
            return self._kernels

    # -- keys ----------------------------------------------------------------------------
    def authenticate(self, secret: str | None) -> GatewayKey | None:
        """The active key for ``secret`` (see the module docstring on caching)."""
        if not secret:
            return None
        cached = self.cached_key(secret)
        if cached is not None:
            return cached
        now = time.monotonic()
        digest = hash_key(secret)
        key = GatewayKey.authenticate(secret)
        with self._lock:
            if key is None:
                self._keys.pop(digest, None)
            else:
                self._keys[digest] = (now, key)
        return key

    def cached_key(self, secret: str) -> GatewayKey | None:
        """The key for ``secret`` if it was authenticated less than ``KEY_CACHE_S`` ago (no
        database: the async view asks this before it hops to a thread)."""
        digest = hash_key(secret)  # the cache holds hashes, never a key itself
        with self._lock:
            cached = self._keys.get(digest)
        if cached is not None and time.monotonic() - cached[0] < KEY_CACHE_S:
            return cached[1]
        return None

    def profile(self, profile_id: int | None) -> Profile:
        """The core profile of ``profile_id`` (see the module docstring on caching)."""
        now = time.monotonic()
        with self._lock:
            cached = self._profiles.get(profile_id)
        if cached is not None and now - cached[0] < PROFILE_CACHE_S:
            return cached[1]
        fresh = core_profile(profile_id)
        with self._lock:
            self._profiles[profile_id] = (now, fresh)
        return fresh

    def forget_key(self, key_id: int | None) -> None:
        """A key was saved or deleted in admin: drop the cached keys, and what this process
        counted as spent on it (the saved count wins: an operator may reset it)."""
        with self._lock:
            self._keys.clear()
        self.limits.forget_key(key_id or 0)

    def forget_profiles(self) -> None:
        """A profile was saved or deleted: read them afresh."""
        with self._lock:
            self._profiles.clear()

    # -- limits and leases ------------------------------------------------------------
    def admit(self, key: GatewayKey, session_id: str) -> bool:
        """Count the request against the key's limits and take the session's lease; True
        when this process held it already (its conversation and kernel are current).
        GatewayRefused when the key is over a limit, or a run worker holds the session (then
        the request is not counted: its slot of the rate window is given back)."""
        try:
            admission = self.limits.admit(
                key.pk, key.rate_limit_per_minute or 0, key.token_budget or 0,
                key.tokens_used, session_id,
            )  # fmt: skip
        except LimitRefused as exc:
            raise GatewayRefused(429, exc.message, "rate_limit_exceeded") from None
        if admission.previous == self.limits.owner:
            return True
        worker = _run_worker_of(session_id)
        if worker:
            self.limits.refund(key.pk, admission, session_id)
            raise GatewayRefused(
                409,
                f"session {session_id!r} is a console run held by worker {worker}; the "
                "gateway does not take sessions a run worker holds",
                "session_held_by_worker",
            )
        self._take_over(session_id, admission.previous)
        return False

    def _take_over(self, session_id: str, previous: str) -> None:
        """This process serves ``session_id`` from now on: what it kept of the session
        (conversation, kernel) may be stale, so it is dropped and rebuilt from the log."""
        self._drop(session_id)
        if previous:
            # As a worker's handover: the new kernel starts empty, the log loses nothing.
            KernelState.objects.filter(session_id=session_id).update(
                alive=False, running=False, pid=None, memory_bytes=None,
                worker=self.limits.owner, last_status="handed over", updated_at=timezone.now(),
            )  # fmt: skip
            with telemetry.span("scroll.gateway.handover", session=session_id, by=self.limits.owner,
                                previous=previous):  # fmt: skip
                pass

    def _keys_of(self, session_id: str) -> list[tuple[str, str]]:
        """The keys of ``session_id``'s conversations (with ``_lock`` held)."""
        keys = [(location, session_id) for location in self._locations]
        return [k for k in keys if k in self._conversations]

    def _drop(self, session_id: str) -> None:
        with self._lock:
            dropped = [self._conversations.pop(k) for k in self._keys_of(session_id)]
            kernels = self._kernels
        for conversation in dropped:
            conversation.close()
        if kernels is not None:
            kernels.release(session_id)

    # -- the heartbeat -------------------------------------------------------------------
    def _beat(self) -> None:
        period = self.lease_s / 3
        due = time.monotonic() + period
        away = False
        while True:
            self._nudge.wait(max(0.0, due - time.monotonic()))
            if self._halt.is_set():
                break
            self._nudge.clear()
            try:
                if time.monotonic() >= due:  # nudges never put the leases' renewal off
                    due = time.monotonic() + period
                    self.heartbeat()
                    if away:
                        log.info("gateway: heartbeat back: leases renewed again")
                    away = False
                else:
                    self.record_kernels()
            except Exception as exc:
                away = self._beat_failed(exc, away)
            finally:
                close_old_connections()
        connections.close_all()

    @staticmethod
    def _beat_failed(exc: Exception, away: bool) -> bool:
        """Log a failed beat: Redis or a database away once per outage (every beat of it
        would repeat the same traceback), anything else each time. Whether it was away."""
        if not (redis_unreachable(exc) or database_unavailable(exc)):
            log.exception("gateway: heartbeat failed")
            return away
        if not away:
            log.warning(
                "gateway: heartbeat cannot reach Redis or the database (%s: %s): leases are "
                "renewed when it is back",
                type(exc).__name__,
                exc,
            )
        return True

    def heartbeat(self) -> list[str]:
        """Keep the holds of requests running here, renew the leases of the sessions served
        here, trim the record (``trim``), and write this process's live kernels for the Kernels
        page. Returns the sessions another process took."""
        with self._beating:
            with self._lock:
                held = sorted({sid for _, sid in self._conversations})
                holds = [e.hold for e in self._sessions.values() if e.hold is not None]
            self.limits.keep(holds)
            lost = self.limits.renew(held)
            for session_id in lost:
                log.info("gateway: session %s was taken over by another process", session_id)
            self.trim(lost)
            self._record_kernels(set(lost))
            return lost

    def trim(self, lost: list[str] | tuple[str, ...] = (), now: float | None = None) -> list[str]:
        """Forget the sessions in ``lost`` (another process took their lease) and those idle
        past ``session_idle_s``: their conversation, their kernel (shut down) and, for an idle
        one, its lease. A session a request waits for or holds is kept. Returns those trimmed."""
        now = time.monotonic() if now is None else now
        taken = set(lost)
        trimmed: list[tuple[str, _Session | None, list[GatewayConversation]]] = []
        with self._lock:
            known = set(self._sessions) | {sid for _, sid in self._conversations} | taken
            for session_id in sorted(known):
                entry = self._sessions.get(session_id)
                idle = entry is None or now - entry.last_used > self.session_idle_s
                if session_id not in taken and not idle:
                    continue
                if entry is not None and (entry.users or not entry.lock.acquire(blocking=False)):
                    continue  # in use: its request finds the lease as it is
                dropped = [self._conversations.pop(k) for k in self._keys_of(session_id)]
                trimmed.append((session_id, entry, dropped))
            kernels = self._kernels
        for session_id, entry, dropped in trimmed:
            try:
                for conversation in dropped:
                    conversation.close()
                if kernels is not None:
                    kernels.release(session_id)
                if session_id not in taken:
                    self.limits.release(session_id)
            finally:
                if entry is not None:
                    with self._lock:
                        if entry.users == 0 and self._sessions.get(session_id) is entry:
                            del self._sessions[session_id]
                    entry.lock.release()
        return [session_id for session_id, _, _ in trimmed]

    def held_sessions(self) -> set[str]:
        """The sessions this process keeps a record of (a conversation or a lock)."""
        with self._lock:
            return set(self._sessions) | {sid for _, sid in self._conversations}

    def record_kernels(self) -> None:
        """Write this process's kernels for the Kernels page now (a request ran a cell)."""
        with self._beating:
            self._record_kernels(set())

    def _record_kernels(self, lost: set[str]) -> None:
        """Write the kernels that changed since the last beat, refresh the others' time in
        one statement, and mark stopped those this process no longer has (reaped when idle,
        or their session taken over)."""
        with self._lock:
            kernels = self._kernels
        if kernels is None:
            return
        now = timezone.now()
        owner = self.limits.owner
        seen: dict[str, tuple[Any, ...]] = {}
        rows: dict[str, dict[str, Any]] = {}
        for session_id, status in kernels.status()["sessions"].items():
            if session_id in lost:
                continue
            row = {
                "worker": owner, "tier": status.tier, "strength": status.strength,
                "layers": ", ".join(status.layers), "missing_layers": list(status.missing_layers),
                "alive": status.alive, "pid": status.pid, "started_at": status.started_at or None,
                "cells": status.cells, "restarts": status.restarts, "running": False,
                "last_status": "gateway" if status.alive else "stopped",
            }  # fmt: skip
            rows[session_id] = {**row, "updated_at": now}
            seen[session_id] = tuple(map(str, row.values()))
        unchanged = [sid for sid in seen if self._written.get(sid) == seen[sid]]
        rewrite = [sid for sid in seen if sid not in unchanged]
        if unchanged:
            refreshed = KernelState.objects.filter(session_id__in=unchanged, worker=owner).update(
                updated_at=now
            )
            if refreshed != len(unchanged):  # a row another process wrote over: write it all
                rewrite += unchanged
        for session_id in rewrite:
            KernelState.objects.update_or_create(session_id=session_id, defaults=rows[session_id])
        gone = [sid for sid in self._written if sid not in seen]
        if gone:
            KernelState.objects.filter(session_id__in=gone, worker=owner).update(
                alive=False, running=False, pid=None, memory_bytes=None,
                last_status="shut down", updated_at=now,
            )  # fmt: skip
        self._written = seen
        if rewrite or gone:
            # A kernel started, changed or stopped: an open Kernels page re-renders its table.
            send_group(KERNELS, {"type": "kernels.changed"})

    # -- parts ---------------------------------------------------------------------------
    def upstream_for(self, key: GatewayKey) -> HttpUpstream:
        api_key = os.environ.get(key.upstream_key_env, "") if key.upstream_key_env else ""
        fmt = key.upstream_format
        ident = (fmt, key.upstream_base_url, api_key, float(key.upstream_timeout_s))
        with self._lock:
            upstream = self._upstreams.get(ident)
            if upstream is None:
                upstream = http_upstream(
                    fmt, key.upstream_base_url, api_key=api_key or None,
                    timeout=key.upstream_timeout_s,
                )  # fmt: skip
                self._upstreams[ident] = upstream
            return upstream

    def conversation(self, key: GatewayKey, session_id: str) -> GatewayConversation:
        log = get_event_log()
        ident = (log.location, session_id)
        with self._lock:
            found = self._conversations.get(ident)
            if found is not None:
                self._conversations.move_to_end(ident)
                found.max_steps = key.max_recall_steps
                return found
        profile_id = key.profile_id
        fresh = GatewayConversation(
            log,
            session_id=session_id,
            agent_id=key.agent_id,
            profile=self.profile(profile_id),
            kernels=self.kernels,
            max_steps=key.max_recall_steps,
            # Re-read before every request: an admin change applies at the next one.
            profile_source=lambda: self.profile(profile_id),
            # Off by default; an operator's live grants, asked at every ms call.
            readable_agents=readable_by,
        )
        with self._lock:
            self._locations.add(log.location)
            found = self._conversations.setdefault(ident, fresh)
            while len(self._conversations) > MAX_CONVERSATIONS:
                _, old = self._conversations.popitem(last=False)
                old.close()
        if found is not fresh:
            fresh.close()
        return found

    def session_index(self, session_id: str) -> Any:
        with self._lock:
            keys = self._keys_of(session_id)
            return self._conversations[keys[0]].index if keys else None

    # -- one request -----------------------------------------------------------------------
    def serve(
        self,
        key: GatewayKey,
        request: ClientRequest,
        session_header: str | None,
        *,
        stages: Stages | None = None,
        on_text: OnText | None = None,
        answered: Callable[[ClientReply], None] | None = None,
        on_block: OnBlock | None = None,
    ) -> ClientReply:
        """Serve ``request`` for ``key`` (see ``GatewayConversation.handle``, ``on_text``,
        ``on_block`` and ``answered`` included) and hand its record to the console. Runs
        holding a slot of ``gate`` (given up while ``answered`` waits for the answer to
        leave)."""
        with self._serving:
            self._in_flight += 1
        try:
            with self.gate:
                if stages is not None:
                    stages.lap("gate")
                return self._serve(
                    key, request, session_header, stages, on_text, answered, on_block
                )
        finally:
            with self._serving:
                self._in_flight -= 1
                if not self._in_flight:
                    self._serving.notify_all()

    @contextmanager
    def _holding(self, session_id: str) -> Iterator[_Session]:
        """Hold ``session_id`` for one request: its lock in this process, then (behind several
        processes) in Redis; a wait gives the CPU slot up. GatewayRefused (409, Retry-After)
        when another process's request held it past ``session_wait_s``."""
        with self._lock:
            entry = self._sessions.get(session_id)
            if entry is None:
                entry = self._sessions[session_id] = _Session()
            entry.users += 1
        try:
            if not entry.lock.acquire(blocking=False):
                with self.gate.released():
                    entry.lock.acquire()
            try:
                try:
                    hold = self.limits.hold(session_id, 0.0)
                except SessionBusy:
                    with self.gate.released():
                        hold = self._hold_waiting(session_id)
                entry.hold = hold
                try:
                    yield entry
                finally:
                    entry.hold = None
                    self.limits.unhold(hold)
            finally:
                entry.lock.release()
        finally:
            with self._lock:
                entry.users -= 1
                entry.last_used = time.monotonic()

    def on_conversation(
        self, key: GatewayKey, session_id: str, work: Callable[[GatewayConversation], T]
    ) -> T:
        """``work`` on the session's conversation, the session held and the key's limits
        counted as for a request: a conversation's items read, added or deleted (the
        Conversations API) without a model call."""
        with self._holding(session_id):
            self.admit(key, session_id)
            return work(self.conversation(key, session_id))

    def once_idle(self, session_id: str, read: Callable[[], T]) -> T:
        """``read()`` once no request holds ``session_id`` (here or, behind several
        processes, elsewhere): an answer leaves before its reply is committed, so a read of
        the log made at once may miss it. GatewayRefused (409) as a request would get."""
        with self._holding(session_id):
            return read()

    def _hold_waiting(self, session_id: str) -> Any:
        log.warning(
            "gateway: session %s is serving a request at another web process; this one "
            "waits up to %g s", session_id, self.session_wait_s,
        )  # fmt: skip
        try:
            return self.limits.hold(session_id, self.session_wait_s)
        except SessionBusy as exc:
            retry = max(1.0, min(self.session_wait_s, self.lease_s))
            raise GatewayRefused(409, str(exc), "session_busy", retry) from None

    def _serve(
        self,
        key: GatewayKey,
        request: ClientRequest,
        session_header: str | None,
        stages: Stages | None,
        on_text: OnText | None,
        answered: Callable[[ClientReply], None] | None,
        on_block: OnBlock | None = None,
    ) -> ClientReply:
        session_id, request = self._session_of(key, request, session_header)
        with self._holding(session_id):
            return self._serve_held(key, request, session_id, stages, on_text, answered, on_block)

    def _session_of(
        self, key: GatewayKey, request: ClientRequest, session_header: str | None
    ) -> tuple[str, ClientRequest]:
        """The session ``request`` is served in, and the request with what it continues
        from resolved (a compaction's point, a stored reply)."""
        if request.compacted:  # the Responses API: continue from a compaction
            point = compaction.open_handle(
                self.compaction_secret, key.agent_id, request.compacted, request.compacted_param
            )
            check_session_header(key.agent_id, session_header, point.session_id, "compaction")
            return point.session_id, replace(request, resumes=point)
        if request.previous_response_id:  # the Responses API: continue a stored reply
            session_id, request = stored_responses.continuation(key, request, session_header)
        elif request.conversation_id:  # the Conversations API: add to a conversation
            session_id = stored_conversations.session_of(key, request, session_header)
        else:
            session_id = session_id_for_request(key, request, session_header)
        return session_id, request

    def compact(
        self,
        key: GatewayKey,
        request: ClientRequest,
        session_header: str | None,
        *,
        stages: Stages | None = None,
    ) -> tuple[str, ClientReply]:
        """Answer a remote compaction (``request.compact``; see
        ``scroll_core.gateway.compaction``): the handle of the point of the session's chain
        it stands for, sealed for the key's agent, and its record, handed to the console as
        a request's."""
        with self._serving:
            self._in_flight += 1
        try:
            with self.gate:
                session_id, request = self._session_of(key, request, session_header)
                with self._holding(session_id):
                    self.admit(key, session_id)
                    conversation = self.conversation(key, session_id)
                    reply: ClientReply | None = None
                    error = ""
                    try:
                        point, reply = conversation.compact(
                            request, stages=stages, idle=self.gate.released
                        )
                        return compaction.seal(self.compaction_secret, key.agent_id, point), reply
                    except Exception as exc:
                        error = f"{type(exc).__name__}: {exc}"[:4000]
                        raise
                    finally:
                        self._record(key, request, session_id, conversation, reply, error, [])
        finally:
            with self._serving:
                self._in_flight -= 1
                if not self._in_flight:
                    self._serving.notify_all()

    def _record(
        self,
        key: GatewayKey,
        request: ClientRequest,
        session_id: str,
        conversation: GatewayConversation,
        reply: ClientReply | None,
        error: str,
        calls: list[Any],
    ) -> None:
        view = conversation.view
        job = Job(key.pk, key.agent_id, key.profile_id, session_id,
                  key.upstream_model(request.model), request.api, request.model,
                  conversation.requests, reply, error,
                  view.report.to_dict() if view is not None else None,
                  IndexSnapshot(conversation.index), calls)  # fmt: skip
        self.recorder.submit(job)

    def _serve_held(
        self,
        key: GatewayKey,
        request: ClientRequest,
        session_id: str,
        stages: Stages | None,
        on_text: OnText | None,
        answered: Callable[[ClientReply], None] | None,
        on_block: OnBlock | None = None,
    ) -> ClientReply:
        self.admit(key, session_id)
        conversation = self.conversation(key, session_id)
        model = key.upstream_model(request.model)
        upstream = self.upstream_for(key)
        if stages is not None:
            stages.lap("session")
        reply: ClientReply | None = None
        error = ""
        calls = wire.WireLog()  # what went upstream, for the record

        def spend(final: ClientReply) -> None:
            spent = final.usage.input_tokens + final.usage.output_tokens
            # The cached key counts too, so its budget holds before the database catches up.
            key.tokens_used += spent
            if key.token_budget:
                self.limits.spend(key.pk, spent)

        def answer(final: ClientReply) -> None:
            spend(final)  # before the answer leaves: the key's next request sees it
            stored_responses.store_reply(key, request, session_id, final)  # (and finds it)
            assert answered is not None
            with self.gate.released():
                answered(final)

        try:
            with wire.collecting(calls):
                reply = conversation.handle(
                    request, upstream, model=model, stages=stages, on_text=on_text,
                    idle=self.gate.released, answered=answer if answered is not None else None,
                    on_block=on_block,
                )  # fmt: skip
            if answered is None:
                spend(reply)
                stored_responses.store_reply(key, request, session_id, reply)
            error = reply.commit_error
            if reply.stats.recalls:
                self._nudge.set()  # a kernel may have started: show it on the Kernels page
            return reply
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"[:4000]
            raise
        finally:
            self._record(key, request, session_id, conversation, reply, error, calls.drain())
            if stages is not None:
                stages.lap("bookkeeping")

    def flush(self, timeout: float = 30.0) -> None:
        """Wait until no request is being served (a reply is committed after its answer
        left) and every finished request is recorded for the console."""
        with self._serving:
            if not self._serving.wait_for(lambda: not self._in_flight, timeout):
                raise TimeoutError(f"gateway requests still in flight after {timeout:g}s")
        if not self.recorder.flush(timeout):
            raise TimeoutError(f"the gateway's console record did not catch up in {timeout:g}s")

    def close(self) -> None:
        self._halt.set()
        self._nudge.set()
        self._heart.join(timeout=10)
        self.recorder.close()
        for conversation in self._conversations.values():
            conversation.close()
        for upstream in self._upstreams.values():
            upstream.close()
        if self._kernels is not None:
            self._kernels.shutdown()
        with contextlib.suppress(Exception):
            for session_id in {sid for _, sid in self._conversations}:
                self.limits.release(session_id)
        self.limits.close()


def _console_namespace() -> str:
    """A short name for the console database (its keys' ids and sessions are its own)."""
    db = settings.DATABASES["default"]
    where = f"{db.get('HOST', '')}:{db.get('PORT', '')}/{db.get('NAME', '')}"
    return hashlib.sha256(where.encode()).hexdigest()[:12]


def _run_worker_of(session_id: str) -> str:
    """The run worker holding ``session_id`` as a console run (queued or leased), or "".

    Asked for every session this process takes, a new conversation's included, so it is one
    statement on the cursor: the ORM's compiling of the same query cost more than running it.
    The lease is compared in SQL as the ORM's ``lease_until__gte`` compares it."""
    connection = connections[RunRecord.objects.db]
    quote = connection.ops.quote_name
    meta = RunRecord._meta
    sql = (
        f"SELECT {quote('status')}, {quote('worker')}, {quote('lease_until')} >= %s "
        f"FROM {quote(meta.db_table)} WHERE {quote('session_id')} = %s AND {quote('kind')} <> %s"
    )
    now = connection.ops.adapt_datetimefield_value(timezone.now())
    with connection.cursor() as cursor:
        cursor.execute(sql, [now, session_id, GATEWAY_KIND])
        row = cursor.fetchone()
    if row is None:
        return ""
    status, worker, live = row
    if status == RunRecord.QUEUED:
        return str(worker or "(queued)")
    return str(worker) if status == RunRecord.RUNNING and live else ""


def session_id_for_request(key: GatewayKey, request: ClientRequest, header: str | None) -> str:
    """The session ``request`` belongs to (see ``scroll_core.gateway.naming``)."""
    return session_id_for(
        key.agent_id, header=header, system=request.system, first_user=request.first_user_text()
    )


@receiver(post_save, sender=GatewayKey, dispatch_uid="gateway-key-saved")
@receiver(post_delete, sender=GatewayKey, dispatch_uid="gateway-key-deleted")
def _key_changed(instance: GatewayKey, **_: Any) -> None:
    with _service_lock:
        service = _service
    if service is not None:
        service.forget_key(instance.pk)


@receiver(post_save, sender=AgentOwner, dispatch_uid="gateway-agent-owner-saved")
@receiver(post_delete, sender=AgentOwner, dispatch_uid="gateway-agent-owner-deleted")
def _agent_moved(**_: Any) -> None:
    """An agent changed project: keys are checked against their project afresh."""
    with _service_lock:
        service = _service
    if service is not None:
        service.forget_key(None)


@receiver(post_save, sender=TuningProfile, dispatch_uid="gateway-profile-saved")
@receiver(post_delete, sender=TuningProfile, dispatch_uid="gateway-profile-deleted")
def _profile_changed(**_: Any) -> None:
    with _service_lock:
        service = _service
    if service is not None:
        service.forget_profiles()


_service_lock = threading.Lock()
_service: GatewayService | None = None


def get_service() -> GatewayService:
    global _service
    with _service_lock:
        if _service is None:
            _service = GatewayService()
        return _service


def reset_service() -> None:
    """Forget every live conversation (tests and a changed Event Log)."""
    global _service
    with _service_lock:
        old, _service = _service, None
    if old is not None:
        old.close()
