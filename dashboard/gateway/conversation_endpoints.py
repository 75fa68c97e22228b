"""The gateway's Conversations API endpoints (OpenAI's ``/v1/conversations``):

- ``POST /v1/conversations`` makes one (``items``, up to 20, and ``metadata``);
- ``GET``, ``POST`` (its metadata) and ``DELETE /v1/conversations/{id}``;
- ``GET`` (``order``, ``limit``, ``after``) and ``POST /v1/conversations/{id}/items``;
- ``GET`` and ``DELETE /v1/conversations/{id}/items/{item_id}``.

A conversation is a session of the Event Log: its items are the session's chain of client
messages, and a response naming the conversation (``POST /v1/responses`` with
``conversation``) adds its input and its reply there. Items are added and deleted with the
session held, as a request holds it, and without a model call; deleting one is a rewrite of
the chain from that item on (what it held stays in the log, recallable). A key reaches only
its own agent's conversations.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

from dashboard.gateway import stored_conversations
from dashboard.gateway.asgi import Request, Response
from dashboard.gateway.endpoints import (
    _body,
    _error,
    _failure,
    _get_key,
    _in_pool,
    _json,
    _posted,
    _secret,
    _stored_call,
)
from dashboard.gateway.models import GatewayKey, StoredConversation
from dashboard.gateway.service import GatewayRefused, get_service
from scroll_core.errors import GatewayRequestInvalid
from scroll_core.gateway import ClientMessage, GatewayConversation
from scroll_core.gateway.conversations_api import (
    MAX_ITEMS_PER_CALL,
    conversation_object,
    item_list,
    parse_metadata,
    without_item,
)
from scroll_core.gateway.responses_api import input_items, item_page, parse_items

__all__ = ["ROUTES"]

_PREFIX = "/v1/conversations/"


def _object(found: StoredConversation) -> dict[str, Any]:
    return conversation_object(
        found.conversation_id, found.created_at.timestamp(), dict(found.metadata or {})
    )


def _on(key: GatewayKey, session_id: str, work: Any) -> Any:
    """``work(conversation)`` with the session held (``GatewayService.on_conversation``)."""
    return _stored_call(get_service().on_conversation, key, session_id, work)


async def conversations(request: Request) -> Response:
    """``POST /v1/conversations``: a new conversation, its first items added."""
    posted = await _posted(request, "openai")
    if isinstance(posted, Response):
        return posted
    key, body = posted
    try:
        if body is None:
            body = {}
        if not isinstance(body, dict):
            raise GatewayRequestInvalid("body", "must be a JSON object")
        metadata = parse_metadata(body.get("metadata"))
        raw = body.get("items")
        items = [] if raw is None else parse_items(raw, "items", most=MAX_ITEMS_PER_CALL)
    except GatewayRequestInvalid as exc:
        return _error("openai", 400, str(exc), param=exc.param)
    conversation_id, session_id = stored_conversations.new_session(key)
    try:
        if items:  # before the row: a conversation is found only once its items are in
            await _in_pool(_on, key, session_id, lambda conv: conv.add_items(items))
        found = await _in_pool(
            _stored_call, stored_conversations.create, key, conversation_id, session_id, metadata
        )
    except GatewayRefused as exc:
        return _failure("openai", exc)
    return _json(_object(found))


async def conversation(request: Request) -> Response:
    """``/v1/conversations/{id}`` and its ``items``: see the module docstring."""
    key = await _get_key(_secret(request))
    if key is None:
        return _error("openai", 401, "missing or invalid API key", code="invalid_api_key")
    conversation_id, _, rest = request.path.removeprefix(_PREFIX).partition("/")
    allowed = ("GET", "POST", "DELETE") if rest in ("", "items") else ("GET", "DELETE")
    if rest not in ("", "items") and not (rest.startswith("items/") and rest != "items/"):
        return _error("openai", 404, f"{request.path}: no such endpoint", code="not_found")
    if request.method not in allowed or (rest == "items" and request.method == "DELETE"):
        takes = "GET or POST" if rest == "items" else " or ".join(allowed)
        return _error("openai", 405, f"{request.path} takes {takes}")
    found = await _in_pool(_stored_call, stored_conversations.find, key, conversation_id)
    if found is None:
        message = stored_conversations.not_found(conversation_id)
        return _error("openai", 404, message, code="conversation_not_found")
    try:
        if rest == "":
            return await _the_conversation(request, key, found)
        if rest == "items":
            return await _the_items(request, key, found)
        return await _one_item(request, key, found, rest.removeprefix("items/"))
    except GatewayRequestInvalid as exc:
        return _error("openai", 400, str(exc), param=exc.param)
    except GatewayRefused as exc:
        return _failure("openai", exc)


async def _the_conversation(request: Request, key: GatewayKey, found: Any) -> Response:
    if request.method == "GET":
        return _json(_object(found))
    if request.method == "DELETE":
        await _in_pool(_stored_call, stored_conversations.forget, found)
        return _json(
            {"id": found.conversation_id, "object": "conversation.deleted", "deleted": True}
        )
    body, refused = _body(request, "openai")
    if refused is not None:
        return refused
    if not isinstance(body, dict) or "metadata" not in body:
        raise GatewayRequestInvalid("metadata", "is required (an object of string values)")
    metadata = parse_metadata(body["metadata"])
    updated = await _in_pool(_stored_call, stored_conversations.update, found, metadata)
    return _json(_object(updated))


async def _the_items(request: Request, key: GatewayKey, found: Any) -> Response:
    if request.method == "POST":
        body, refused = _body(request, "openai")
        if refused is not None:
            return refused
        raw = body.get("items") if isinstance(body, dict) else None
        if not isinstance(raw, list) or not raw:
            raise GatewayRequestInvalid("items", "is required (a non-empty list of items)")
        messages = parse_items(raw, "items", most=MAX_ITEMS_PER_CALL)
        added = await _in_pool(_on, key, found.session_id, lambda c: c.add_items(messages))
        return _json(item_list(input_items(added)))
    query = {k: v[-1] for k, v in parse_qs(request.query).items()}
    try:
        limit = int(query.get("limit", "20"))
    except ValueError:
        raise GatewayRequestInvalid("limit", "must be an integer") from None
    held = await _in_pool(_on, key, found.session_id, lambda c: c.items())
    page = item_page(
        input_items(held), order=query.get("order", "desc"), limit=limit, after=query.get("after")
    )
    return _json(page)


async def _one_item(request: Request, key: GatewayKey, found: Any, item_id: str) -> Response:
    if request.method == "GET":
        held = await _in_pool(_on, key, found.session_id, lambda c: c.items())
        item = next((i for i in input_items(held) if i["id"] == item_id), None)
        if item is None:
            return _no_item(found, item_id)
        return _json(item)
    deleted = await _in_pool(_on, key, found.session_id, lambda c: _delete(c, item_id))
    if not deleted:
        return _no_item(found, item_id)
    return _json(_object(found))


def _delete(conv: GatewayConversation, item_id: str) -> bool:
    """Take item ``item_id`` out of the conversation (read, cut and rewritten with the
    session held); whether it was there."""
    kept: list[ClientMessage] | None = without_item(conv.items(), item_id)
    if kept is None:
        return False
    conv.put_items(kept)
    return True


def _no_item(found: Any, item_id: str) -> Response:
    message = f"no item {item_id!r} in conversation {found.conversation_id!r}"
    return _error("openai", 404, message, code="item_not_found")


ROUTES = {
    "/v1/conversations": conversations,
    "/v1/conversations/*": conversation,
}
