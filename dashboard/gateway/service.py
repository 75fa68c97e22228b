"""Serving one gateway request, synchronously, in a worker thread of the ASGI server.

The service keeps, per process, the live ``GatewayConversation`` of each session (rebuilt
from the Event Log when a session is first served here, the least recently used dropped past
``MAX_CONVERSATIONS``), one ``HttpUpstream`` per upstream, and each key's request times for
its rate limit. After every request the session's ``RunRecord`` (kind ``gateway``) and its
compress records are saved and pushed to the console, as the runner does for its runs - by
the ``Recorder``'s thread, in batches, so the client's answer never waits on the console's
database (``flush()`` waits for it).

Nothing on the request path reads the console's database once warm: authenticated keys are
remembered for ``KEY_CACHE_S`` seconds and each profile for ``PROFILE_CACHE_S``; saving or
deleting a key or a profile drops them at once in this process, and other processes see the
change within those times. A token budget is enforced against a count at most that old.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from dashboard.eventlog import get_event_log
from dashboard.gateway.recorder import IndexSnapshot, Job, Recorder
from dashboard.grants import readable_by
from dashboard.models import GatewayKey, TuningProfile, hash_key
from dashboard.profiles import core_profile
from scroll_core.gateway import (
    ClientReply,
    ClientRequest,
    GatewayConversation,
    HttpUpstream,
    Stages,
    http_upstream,
)
from scroll_core.gateway.naming import session_id_for
from scroll_core.gateway.upstream import OnText
from scroll_core.kernel import KernelConfig, KernelManager
from scroll_core.profile import Profile

__all__ = [
    "GatewayRefused",
    "GatewayService",
    "get_service",
    "reset_service",
    "session_id_for_request",
]

MAX_CONVERSATIONS = 256
KEY_CACHE_S = 5.0
PROFILE_CACHE_S = 2.0

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
    """The key may not make this request now (rate limit or token budget): HTTP ``status``."""

    status: int
    message: str

    def __str__(self) -> str:
        return self.message


class GatewayService:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._conversations: OrderedDict[tuple[str, str], GatewayConversation] = OrderedDict()
        self._upstreams: dict[tuple[str, str, str, float], HttpUpstream] = {}
        self._calls: dict[int, deque[float]] = {}
        self._keys: dict[str, tuple[float, GatewayKey]] = {}
        self._profiles: dict[int | None, tuple[float, Profile]] = {}
        self._spent: dict[int, int] = {}  # tokens_used per key, as this process counted
        self.recorder = Recorder()
        self.gate = Gate(int(getattr(settings, "SCROLL_GATEWAY_CPU_SLOTS", 4)))
        self._kernels: KernelManager | None = None

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
                # The console's record of this process's last requests may not be written
                # yet: the budget counts what this process knows was spent.
                key.tokens_used = max(key.tokens_used, self._spent.get(key.pk, 0))
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
            self._spent.pop(key_id or 0, None)

    def forget_profiles(self) -> None:
        """A profile was saved or deleted: read them afresh."""
        with self._lock:
            self._profiles.clear()

    # -- limits ------------------------------------------------------------------------
    def admit(self, key: GatewayKey) -> None:
        """Raise GatewayRefused when the key is over its rate limit or token budget."""
        if key.token_budget and key.tokens_used >= key.token_budget:
            raise GatewayRefused(
                429, f"this key spent its token budget ({key.token_budget:,} upstream tokens)"
            )
        if not key.rate_limit_per_minute:
            return
        now = time.monotonic()
        with self._lock:
            window = self._calls.setdefault(key.pk, deque())
            while window and now - window[0] >= 60.0:
                window.popleft()
            if len(window) >= key.rate_limit_per_minute:
                raise GatewayRefused(
                    429, f"rate limit: {key.rate_limit_per_minute} requests per minute"
                )
            window.append(now)

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
            found = self._conversations.setdefault(ident, fresh)
            while len(self._conversations) > MAX_CONVERSATIONS:
                _, old = self._conversations.popitem(last=False)
                old.close()
        if found is not fresh:
            fresh.close()
        return found

    def session_index(self, session_id: str) -> Any:
        with self._lock:
            for (_, sid), conversation in self._conversations.items():
                if sid == session_id:
                    return conversation.index
        return None

    # -- one request -----------------------------------------------------------------------
    def serve(
        self,
        key: GatewayKey,
        request: ClientRequest,
        session_header: str | None,
        *,
        stages: Stages | None = None,
        on_text: OnText | None = None,
    ) -> ClientReply:
        """Serve ``request`` for ``key`` (see ``GatewayConversation.handle``, ``on_text``
        included) and hand its record to the console. Runs holding a slot of ``gate``."""
        with self.gate:
            if stages is not None:
                stages.lap("gate")
            return self._serve(key, request, session_header, stages, on_text)

    def _serve(
        self,
        key: GatewayKey,
        request: ClientRequest,
        session_header: str | None,
        stages: Stages | None,
        on_text: OnText | None,
    ) -> ClientReply:
        session_id = session_id_for_request(key, request, session_header)
        conversation = self.conversation(key, session_id)
        model = key.upstream_model(request.model)
        upstream = self.upstream_for(key)
        if stages is not None:
            stages.lap("session")
        reply: ClientReply | None = None
        error = ""
        try:
            reply = conversation.handle(
                request, upstream, model=model, stages=stages, on_text=on_text,
                idle=self.gate.released,
            )  # fmt: skip
            # The cached key counts too, so its budget holds before the database catches up.
            key.tokens_used += reply.usage.input_tokens + reply.usage.output_tokens
            with self._lock:
                self._spent[key.pk] = max(self._spent.get(key.pk, 0), key.tokens_used)
            return reply
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"[:4000]
            raise
        finally:
            view = conversation.view
            job = Job(key.pk, key.agent_id, key.profile_id, session_id, model, request.api,
                       request.model, conversation.requests, reply, error,
                       view.report.to_dict() if view is not None else None,
                       IndexSnapshot(conversation.index))  # fmt: skip
            self.recorder.submit(job)
            if stages is not None:
                stages.lap("bookkeeping")

    def flush(self, timeout: float = 30.0) -> None:
        """Wait until every finished request is recorded for the console."""
        if not self.recorder.flush(timeout):
            raise TimeoutError(f"the gateway's console record did not catch up in {timeout:g}s")

    def close(self) -> None:
        self.recorder.close()
        for conversation in self._conversations.values():
            conversation.close()
        for upstream in self._upstreams.values():
            upstream.close()
        if self._kernels is not None:
            self._kernels.shutdown()


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
