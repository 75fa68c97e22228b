"""Serving one gateway request, synchronously, in a worker thread of the ASGI server.

The service keeps, per process, the live ``GatewayConversation`` of each session (rebuilt
from the Event Log when a session is first served here, the least recently used dropped past
``MAX_CONVERSATIONS``), one ``HttpUpstream`` per upstream, and each key's request times for
its rate limit. After every request the session's ``RunRecord`` (kind ``gateway``) and its
compress records are saved and pushed to the console, as the runner does for its runs - by one
background thread, in request order, so the client's answer never waits on the console's
database (``flush()`` waits for it). Authenticated keys are remembered for
``KEY_CACHE_S`` seconds: a key deactivated in admin stops working within that time, and a
token budget is enforced against a count at most that old.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict, deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import close_old_connections
from django.db.models import F
from django.utils import timezone

from dashboard.eventlog import get_event_log
from dashboard.grants import readable_by
from dashboard.models import CompressEvent, GatewayKey, RunRecord, hash_key
from dashboard.profiles import core_profile
from dashboard.spans import push_session
from scroll_core.gateway import ClientReply, ClientRequest, GatewayConversation, HttpUpstream
from scroll_core.gateway.naming import session_id_for
from scroll_core.kernel import KernelConfig, KernelManager

__all__ = ["GatewayRefused", "GatewayService", "get_service", "reset_service"]

MAX_CONVERSATIONS = 256
GATEWAY_KIND = "gateway"
KEY_CACHE_S = 5.0

log = logging.getLogger("dashboard.gateway")


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
        self._upstreams: dict[tuple[str, str, float], HttpUpstream] = {}
        self._calls: dict[int, deque[float]] = {}
        self._keys: dict[str, tuple[float, GatewayKey]] = {}
        self._recorder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gateway-record")
        self._pending: Future[None] | None = None
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
        now = time.monotonic()
        digest = hash_key(secret)  # the cache holds hashes, never a key itself
        with self._lock:
            cached = self._keys.get(digest)
        if cached is not None and now - cached[0] < KEY_CACHE_S:
            return cached[1]
        key = GatewayKey.authenticate(secret)
        with self._lock:
            if key is None:
                self._keys.pop(digest, None)
            else:
                self._keys[digest] = (now, key)
        return key

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
        ident = (key.upstream_base_url, api_key, float(key.upstream_timeout_s))
        with self._lock:
            upstream = self._upstreams.get(ident)
            if upstream is None:
                upstream = HttpUpstream(
                    key.upstream_base_url, api_key=api_key or None, timeout=key.upstream_timeout_s
                )
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
            profile=core_profile(profile_id),
            kernels=self.kernels,
            max_steps=key.max_recall_steps,
            # Re-read before every request: an admin change applies at the next one.
            profile_source=lambda: core_profile(profile_id),
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
        self, key: GatewayKey, request: ClientRequest, session_header: str | None
    ) -> ClientReply:
        session_id = session_id_for(
            key.agent_id,
            header=session_header,
            system=request.system,
            first_user=request.first_user_text(),
        )
        conversation = self.conversation(key, session_id)
        model = key.upstream_model(request.model)
        reply: ClientReply | None = None
        error = ""
        try:
            reply = conversation.handle(request, self.upstream_for(key), model=model)
            # The cached key counts too, so its budget holds before the database catches up.
            key.tokens_used += reply.usage.input_tokens + reply.usage.output_tokens
            return reply
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"[:4000]
            raise
        finally:
            view = conversation.view
            job = _Job(key.pk, key.agent_id, key.profile_id, session_id, model, request.api,
                       request.model, conversation.requests, reply, error,
                       view.report.to_dict() if view is not None else None,
                       _IndexSnapshot(conversation.index))  # fmt: skip
            with self._lock:
                self._pending = self._recorder.submit(_record_safely, job)

    def flush(self, timeout: float = 30.0) -> None:
        """Wait until every finished request is recorded for the console."""
        with self._lock:
            pending = self._pending
        if pending is not None:
            pending.result(timeout)

    def close(self) -> None:
        self._recorder.shutdown(wait=True)
        for conversation in self._conversations.values():
            conversation.close()
        for upstream in self._upstreams.values():
            upstream.close()
        if self._kernels is not None:
            self._kernels.shutdown()


@dataclass
class _Job:
    """What the console records about one finished request (read in the request's thread)."""

    key_id: int
    agent_id: str
    profile_id: int | None
    session_id: str
    model: str
    api: str
    client_model: str
    turn: int
    reply: ClientReply | None
    error: str
    report: dict[str, Any] | None
    index: Any


def _record_safely(job: _Job) -> None:
    close_old_connections()
    try:
        _record(job)
    except Exception:  # the console's bookkeeping must never break the gateway
        log.exception("gateway: recording session %s failed", job.session_id)


def _record(job: _Job) -> None:
    run, _ = RunRecord.objects.get_or_create(
        session_id=job.session_id,
        defaults={
            "task": f"gateway: agent {job.agent_id} through {job.api} ({job.client_model})",
            "kind": GATEWAY_KIND,
            "profile_id": job.profile_id,
            "model_name": job.model,
            "started_at": timezone.now(),
        },
    )
    run.model_name = job.model
    run.error = job.error
    reply = job.reply
    if reply is not None:
        rows = [
            CompressEvent.from_step(
                run, run.session_id, job.turn, step, _Step(reason, record), job.index
            )
            for step, (reason, record) in enumerate(reply.compressions)
        ]
        CompressEvent.objects.bulk_create(rows)
        run.turns += 1
        run.steps += reply.stats.upstream_calls
        run.evictions += reply.stats.evictions
        run.folds += sum(row.folds for row in rows)
        run.expands += reply.stats.recalls
        run.last_answer = reply.content[:4000]
        spent = reply.usage.input_tokens + reply.usage.output_tokens
        GatewayKey.objects.filter(pk=job.key_id).update(
            tokens_used=F("tokens_used") + spent,
            requests=F("requests") + 1,
            last_used_at=timezone.now(),
        )
    if job.report is not None:
        run.view_tokens = job.report["total"]
        run.trigger_tokens = job.report["trigger_tokens"]
        run.context_size = job.report["context_size"]
        run.last_report = job.report
    run.status = RunRecord.DONE if reply is not None else RunRecord.FAILED
    run.ended_at = timezone.now()
    run.save()
    push_session(run)


class _IndexSnapshot:
    """The index's size and tier profile when the request finished (the live index moves on)."""

    def __init__(self, index: Any) -> None:
        self._size = len(index)
        self._tiers = index.tier_profile()

    def __len__(self) -> int:
        return self._size

    def tier_profile(self) -> list[int]:
        return list(self._tiers)


@dataclass
class _Step:
    """What ``CompressEvent.from_step`` reads of an agent-loop compress step."""

    reason: str
    record: Any


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
