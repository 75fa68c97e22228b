"""Conversations of the OpenAI Conversations API (``StoredConversation`` rows): making one,
finding, updating and forgetting it, and the session a response naming it is served in.

A conversation's items live in the Event Log, in its own session; the row names that
session. A key reaches only its own agent's conversations: another agent's id is not found,
exactly as an id that never existed.
"""

from __future__ import annotations

from dashboard.gateway.models import GatewayKey, StoredConversation
from scroll_core.errors import GatewayRequestInvalid
from scroll_core.gateway import ClientRequest
from scroll_core.gateway.conversations_api import new_conversation_id
from scroll_core.gateway.naming import check_session_header, session_id_for

__all__ = ["create", "find", "forget", "new_session", "not_found", "session_of", "update"]


def new_session(key: GatewayKey) -> tuple[str, str]:
    """A new conversation id of the key's agent, and the session of its own it will have."""
    conversation_id = new_conversation_id()
    return conversation_id, session_id_for(
        key.agent_id, header=conversation_id, system="", first_user=""
    )


def create(
    key: GatewayKey, conversation_id: str, session_id: str, metadata: dict[str, str]
) -> StoredConversation:
    """The row of a conversation ``new_session`` named (its items, if any, already added)."""
    return StoredConversation.objects.create(
        conversation_id=conversation_id,
        agent_id=key.agent_id,
        session_id=session_id,
        metadata=metadata,
    )


def find(key: GatewayKey, conversation_id: str) -> StoredConversation | None:
    """The key's agent's conversation ``conversation_id``, or None."""
    return StoredConversation.objects.filter(
        conversation_id=conversation_id, agent_id=key.agent_id
    ).first()


def update(found: StoredConversation, metadata: dict[str, str]) -> StoredConversation:
    found.metadata = metadata
    found.save(update_fields=["metadata"])
    return found


def forget(found: StoredConversation) -> None:
    """Delete the conversation's row: the id stops resolving; its items stay in the log."""
    found.delete()


def not_found(conversation_id: str) -> str:
    return f"no conversation {conversation_id!r} for this key (it was deleted, or never made)"


def session_of(key: GatewayKey, request: ClientRequest, session_header: str | None) -> str:
    """The session of the conversation ``request`` adds to. Refused, naming the field, when
    the key's agent has no such conversation, or when ``X-Scroll-Session`` names another
    session."""
    found = find(key, request.conversation_id)
    if found is None:
        raise GatewayRequestInvalid("conversation", not_found(request.conversation_id))
    check_session_header(key.agent_id, session_header, found.session_id, "the conversation")
    return found.session_id
