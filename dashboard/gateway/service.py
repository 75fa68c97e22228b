"""Serving one gateway request, synchronously, in a worker thread of the ASGI server.

The service keeps, per process, the live ``GatewayConversation`` of each session (rebuilt
from the Event Log when a session is first served here, the least recently used dropped past
``MAX_CONVERSATIONS``), one ``HttpUpstream`` per upstream, and each key's request times for
its rate limit. After every request the session's ``RunRecord`` (kind ``gateway``) and its
compress records are saved and pushed to the console, as the runner does for its runs.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Any

from django.db.models import F
from django.utils import timezone

from dashboard.eventlog import get_event_log
from dashboard.models import CompressEvent, GatewayKey, RunRecord
from dashboard.profiles import core_profile
from dashboard.runner import get_runner
from dashboard.spans import push_session
from scroll_core.gateway import ClientReply, ClientRequest, GatewayConversation, HttpUpstream
from scroll_core.gateway.naming import session_id_for

__all__ = ["GatewayRefused", "get_service", "reset_service"]

MAX_CONVERSATIONS = 256
GATEWAY_KIND = "gateway"


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
        ident = (str(log.path), session_id)
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
            kernels=get_runner().kernels,
            max_steps=key.max_recall_steps,
            # Re-read before every request: an admin change applies at the next one.
            profile_source=lambda: core_profile(profile_id),
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
        run = _run_for(key, session_id, model, request)
        reply: ClientReply | None = None
        try:
            reply = conversation.handle(request, self.upstream_for(key), model=model)
            return reply
        except Exception as exc:
            run.error = f"{type(exc).__name__}: {exc}"[:4000]
            raise
        finally:
            _record(run, key, conversation, reply)


def _run_for(key: GatewayKey, session_id: str, model: str, request: ClientRequest) -> RunRecord:
    run, _ = RunRecord.objects.get_or_create(
        session_id=session_id,
        defaults={
            "task": f"gateway: agent {key.agent_id} through {request.api} ({request.model})",
            "kind": GATEWAY_KIND,
            "profile_id": key.profile_id,
            "model_name": model,
            "started_at": timezone.now(),
        },
    )
    run.status = RunRecord.RUNNING
    run.model_name = model
    run.error = ""
    run.save(update_fields=["status", "model_name", "error"])
    push_session(run)
    return run


def _record(
    run: RunRecord,
    key: GatewayKey,
    conversation: GatewayConversation,
    reply: ClientReply | None,
) -> None:
    index = conversation.index
    if reply is not None:
        rows = [
            CompressEvent.from_step(
                run, run.session_id, conversation.requests, step, _Step(reason, record), index
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
        GatewayKey.objects.filter(pk=key.pk).update(
            tokens_used=F("tokens_used") + spent,
            requests=F("requests") + 1,
            last_used_at=timezone.now(),
        )
    view = conversation.view
    if view is not None:
        run.view_tokens = view.tokens
        run.trigger_tokens = view.report.trigger_tokens
        run.context_size = view.report.context_size
        run.last_report = view.report.to_dict()
    run.status = RunRecord.DONE if reply is not None else RunRecord.FAILED
    run.ended_at = timezone.now()
    run.save()
    push_session(run)


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
        for conversation in old._conversations.values():
            conversation.close()
        for upstream in old._upstreams.values():
            upstream.close()
