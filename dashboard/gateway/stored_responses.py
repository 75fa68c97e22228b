"""Stored Responses API replies (``StoredResponse`` rows): continuing from one
(``previous_response_id``), storing one before its answer leaves, reading and deleting one
(``/v1/responses/{id}``), and forgetting those older than ``SCROLL_GATEWAY_RESPONSE_DAYS``.

A key reaches only its own agent's rows: another agent's response id is not found, exactly
as an id that never existed, so ids tell nothing across tenants.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from dashboard.eventlog import get_event_log
from dashboard.gateway.models import GatewayKey, StoredResponse
from scroll_core.errors import GatewayRequestInvalid
from scroll_core.gateway import ClientMessage, ClientReply, ClientRequest, StoredPlace
from scroll_core.gateway.naming import check_session_header
from scroll_core.gateway.responses_api import whole_response
from scroll_core.gateway.stored import conversation_before

__all__ = ["continuation", "conversation_of", "find", "forget", "prune", "store_reply"]


def _oldest() -> Any:
    """The creation time before which a stored reply has expired."""
    return timezone.now() - timedelta(days=settings.SCROLL_GATEWAY_RESPONSE_DAYS)


def find(key: GatewayKey, response_id: str) -> StoredResponse | None:
    """The key's agent's unexpired stored reply ``response_id``, or None."""
    return StoredResponse.objects.filter(
        response_id=response_id, agent_id=key.agent_id, created_at__gte=_oldest()
    ).first()


def forget(key: GatewayKey, response_id: str) -> bool:
    """Delete the key's agent's stored reply ``response_id``; whether there was one. The
    conversation stays in the Event Log: only the id stops resolving."""
    deleted, _ = StoredResponse.objects.filter(
        response_id=response_id, agent_id=key.agent_id
    ).delete()
    return bool(deleted)


def _place(found: StoredResponse) -> StoredPlace:
    return StoredPlace(found.response_id, found.position, found.reply_fp, found.logged_as)


def conversation_of(
    found: StoredResponse, *, through: bool = False
) -> list[tuple[int, ClientMessage]] | None:
    """The messages before the stored reply ``found`` (earlier turns included; ``through``:
    and the reply), each with the seq of its first event, read from its session's log
    without taking the session (the log is append-only: what came before a reply never
    changes); None when the log holds no such reply (its commit failed, or is running)."""
    events = get_event_log().session_events(found.session_id, limit=None)
    return conversation_before(events, _place(found), through=through)


def continuation(
    key: GatewayKey, request: ClientRequest, session_header: str | None
) -> tuple[str, ClientRequest]:
    """The session of the stored reply ``request`` continues from, and ``request`` with
    ``continues`` set to where that reply sits (the conversation puts what comes before it
    back in front). Refused, naming the field, when no such reply is stored for the key's
    agent, or when ``X-Scroll-Session`` names another session."""
    found = find(key, request.previous_response_id)
    if found is None:
        raise GatewayRequestInvalid(
            "previous_response_id",
            f"no stored response {request.previous_response_id!r} for this key (it was "
            f"made with store: false, deleted, or is older than "
            f"{settings.SCROLL_GATEWAY_RESPONSE_DAYS} days)",
        )
    check_session_header(
        key.agent_id, session_header, found.session_id, "previous_response_id's response"
    )
    return found.session_id, replace(request, continues=_place(found))


def store_reply(
    key: GatewayKey, request: ClientRequest, session_id: str, reply: ClientReply
) -> None:
    """Store ``reply`` under ``request.response_id`` when the request asked for it. Run
    before the answer leaves: the client's next request may name it at once."""
    if request.api != "responses" or not request.store or not request.response_id:
        return
    StoredResponse.objects.create(
        response_id=request.response_id,
        agent_id=key.agent_id,
        session_id=session_id,
        position=reply.position,
        reply_fp=reply.message().fingerprint(),
        logged_as=reply.logged_as,
        response=whole_response(request, reply),
    )


def prune() -> int:
    """Delete the stored replies past ``SCROLL_GATEWAY_RESPONSE_DAYS``; how many."""
    deleted, _ = StoredResponse.objects.filter(created_at__lt=_oldest()).delete()
    return deleted
