"""The gateway's endpoints: ``POST /v1/chat/completions``, ``GET /v1/models``,
``POST /v1/messages`` and ``POST /v1/messages/count_tokens``, served by ``GatewayRouter``
(``dashboard.gateway.asgi``) in front of the console's Django app.

Each endpoint authenticates the key (``Authorization: Bearer`` or ``x-api-key``), parses the
body into the provider-neutral request, and serves it in a thread of the gateway's pool (the
recall loop, the kernel and the Event Log are synchronous). Errors use the provider's shape:
OpenAI's ``{"error": {...}}`` on the OpenAI routes, Anthropic's ``{"type": "error", ...}`` on
``/v1/messages``. A streamed reply is sent once the internal recall steps are done, as SSE.
Every answer to a served request carries ``Server-Timing``: the laps of ``Stages``.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections

from dashboard.gateway.asgi import Request, Response
from dashboard.gateway.service import GatewayRefused, get_service
from dashboard.models import GatewayKey
from scroll_core.errors import (
    ContextOverflow,
    ContextWindowUnfit,
    GatewayRequestInvalid,
    ModelError,
)
from scroll_core.gateway import ClientReply, ClientRequest, Stages, anthropic_api, openai_api

T = TypeVar("T")
SESSION_HEADER = "X-Scroll-Session"
_SESSION_HEADER = SESSION_HEADER.lower()


def _json(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(status, json.dumps(data, ensure_ascii=False).encode(), headers or {})


# -- errors in the providers' shapes ------------------------------------------------------
def _openai_error(
    status: int, message: str, *, kind: str, param: str | None = None, code: str | None = None
) -> Response:
    return _json(openai_api.error_body(message, kind=kind, param=param, code=code), status)


def _anthropic_error(status: int, message: str, **_: Any) -> Response:
    return _json(anthropic_api.error_body(message, status=status), status)


_OPENAI_KINDS = {
    413: "invalid_request_error",
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    429: "rate_limit_error",
    502: "api_error",
    504: "timeout",
}


def _error(
    api: str, status: int, message: str, *, param: str | None = None, code: str | None = None
) -> Response:
    if api == "anthropic":
        return _anthropic_error(status, message)
    kind = _OPENAI_KINDS.get(status, "api_error")
    return _openai_error(status, message, kind=kind, param=param, code=code)


def _upstream_error(api: str, exc: ModelError) -> Response:
    """An upstream failure mapped to the status a client's retry logic expects, with the
    upstream's own message kept."""
    said = f"upstream: {exc.message}"
    if isinstance(exc, ContextOverflow):
        return _error(api, 400, said, code="context_length_exceeded")
    if exc.code == "timeout":
        return _error(api, 504, said, code="upstream_timeout")
    if exc.status is None:
        return _error(api, 502, said, code=exc.code or "upstream_unreachable")
    if exc.status == 429:
        return _error(api, 429, said, code=exc.code)
    if exc.status in (401, 403):
        # The client's key was fine; the gateway's key to the upstream was not.
        return _error(
            api, 502, f"{said} (the upstream refused the gateway's credentials)", code=exc.code
        )
    if 400 <= exc.status < 500:
        return _error(api, exc.status, said, code=exc.code)
    return _error(api, 502, said, code=exc.code or f"upstream_{exc.status}")


# -- helpers -------------------------------------------------------------------------------
def _secret(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    if header.lower().startswith("bearer "):
        return header[7:].strip()
    return request.headers.get("x-api-key") or None


async def _get_key(secret: str | None) -> GatewayKey | None:
    if not secret:
        return None
    return get_service().cached_key(secret) or await _authenticate(secret)


async def _authenticate(secret: str) -> GatewayKey | None:
    return await _in_pool(_authenticate_sync, secret)


def _authenticate_sync(secret: str) -> GatewayKey | None:
    try:
        return get_service().authenticate(secret)
    finally:
        close_old_connections()


def body_limit() -> int:
    """SCROLL_GATEWAY_MAX_BODY_MB in bytes: an agent resends its whole history on every call,
    far past Django's form-size limit, which does not apply here."""
    return int(settings.SCROLL_GATEWAY_MAX_BODY_MB) * 1024 * 1024


def too_large(request: Request, size: int, limit: int) -> Response:
    api = "anthropic" if request.path.startswith("/v1/messages") else "openai"
    message = f"the body is {size:,} bytes or more; this gateway takes at most {limit:,}"
    return _error(api, 413, message, param="body")


def _body(request: Request, api: str) -> tuple[Any, Response | None]:
    """The decoded JSON body (its size was checked when it was read)."""
    try:
        return json.loads(request.body or b"null"), None
    except (ValueError, UnicodeDecodeError) as exc:
        return None, _error(api, 400, f"the body is not JSON: {exc}", param="body")


def _serve_sync(
    key: GatewayKey, parsed: ClientRequest, session: str | None, stages: Stages
) -> ClientReply:
    stages.lap("hop")
    service = get_service()
    service.admit(key)
    try:
        return service.serve(key, parsed, session, stages=stages)
    finally:
        close_old_connections()  # this pool's threads outlive requests; their connections not


_threads: ThreadPoolExecutor | None = None


async def _in_pool(fn: Callable[..., T], *args: Any) -> T:
    """Run ``fn`` in a thread of the gateway's own pool: the loop's default executor has a
    handful of threads, and each request holds one while its upstream answers."""
    global _threads
    if _threads is None:
        _threads = ThreadPoolExecutor(
            max_workers=settings.SCROLL_GATEWAY_THREADS, thread_name_prefix="gateway"
        )
    return await sync_to_async(fn, thread_sensitive=False, executor=_threads)(*args)


async def _serve(
    key: GatewayKey, parsed: ClientRequest, session: str | None, stages: Stages
) -> ClientReply:
    reply = await _in_pool(_serve_sync, key, parsed, session, stages)
    stages.lap("hop_back")
    return reply


async def _handle(request: Request, api: str, parse: Callable[[Any], ClientRequest]) -> Response:
    if request.method != "POST":
        return _error(api, 405, f"{request.path} takes POST")
    stages = Stages()
    key = await _get_key(_secret(request))
    if key is None:
        return _error(api, 401, "missing or invalid API key", code="invalid_api_key")
    stages.lap("auth")
    body, refused = _body(request, api)
    if refused is not None:
        return refused
    stages.lap("body")
    try:
        parsed = parse(body)
        stages.lap("parse")
        reply = await _serve(key, parsed, request.headers.get(_SESSION_HEADER), stages)
    except GatewayRequestInvalid as exc:
        return _error(api, 400, str(exc), param=exc.param)
    except GatewayRefused as exc:
        return _error(api, exc.status, exc.message, code="rate_limit_exceeded")
    except ModelError as exc:
        return _upstream_error(api, exc)
    except ContextWindowUnfit as exc:
        return _error(api, 400, str(exc), code="context_length_exceeded")
    headers = {SESSION_HEADER: reply.stats.session_id}
    if parsed.stream:
        events = (
            _anthropic_stream(reply)
            if api == "anthropic"
            else _openai_stream(reply, parsed.include_usage)
        )
        stages.lap("encode")
        return _sse(events, _timed(headers, stages))
    data = (
        anthropic_api.message_object(reply)
        if api == "anthropic"
        else openai_api.chat_completion(reply)
    )
    response = _json(data, headers=headers)
    stages.lap("encode")
    response.headers["Server-Timing"] = _server_timing(stages)
    return response


def _server_timing(stages: Stages) -> str:
    """Server-Timing: the view's laps (upstream calls included) and ``scroll``, their sum,
    so a client or the bench can tell them from the HTTP and framework time around them."""
    return f"{stages.header()}, scroll;dur={stages.total():.2f}"


def _timed(headers: dict[str, str], stages: Stages) -> dict[str, str]:
    return {**headers, "Server-Timing": _server_timing(stages)}


def _sse(events: AsyncIterator[bytes], headers: dict[str, str]) -> Response:
    headers = {**headers, "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return Response(200, events, headers, content_type="text/event-stream")


async def _openai_stream(reply: ClientReply, include_usage: bool) -> AsyncIterator[bytes]:
    completion_id, created = openai_api.new_id(), int(time.time())
    for chunk in openai_api.chat_completion_chunks(
        reply, completion_id=completion_id, created=created
    ):
        yield b"data: " + json.dumps(chunk, ensure_ascii=False).encode() + b"\n\n"
    if include_usage:
        last = openai_api.usage_chunk(reply, completion_id=completion_id, created=created)
        yield b"data: " + json.dumps(last, ensure_ascii=False).encode() + b"\n\n"
    yield b"data: [DONE]\n\n"


async def _anthropic_stream(reply: ClientReply) -> AsyncIterator[bytes]:
    for event, data in anthropic_api.message_events(reply):
        yield (
            f"event: {event}\ndata: ".encode()
            + json.dumps(data, ensure_ascii=False).encode()
            + b"\n\n"
        )


# -- the endpoints -------------------------------------------------------------------------
async def chat_completions(request: Request) -> Response:
    return await _handle(request, "openai", openai_api.parse_chat_request)


async def messages(request: Request) -> Response:
    return await _handle(request, "anthropic", anthropic_api.parse_messages_request)


async def count_tokens(request: Request) -> Response:
    """``POST /v1/messages/count_tokens``: the tokens of the history as the client sent it
    (Scroll sends upstream less; the ``scroll`` field of each reply says how much)."""
    if request.method != "POST":
        return _error("anthropic", 405, f"{request.path} takes POST")
    key = await _get_key(_secret(request))
    if key is None:
        return _error("anthropic", 401, "missing or invalid API key")
    body, refused = _body(request, "anthropic")
    if refused is not None:
        return refused
    try:
        parsed = anthropic_api.parse_messages_request(body, counting=True)
    except GatewayRequestInvalid as exc:
        return _error("anthropic", 400, str(exc), param=exc.param)
    return _json({"input_tokens": await _in_pool(_client_tokens, parsed)})


def _client_tokens(parsed: ClientRequest) -> int:
    from dashboard.eventlog import get_event_log

    counter = get_event_log().tokens
    parts = [parsed.system, json.dumps(list(parsed.tools))] if parsed.tools else [parsed.system]
    parts += [
        m.content + "".join(c.raw_arguments or "" for c in m.tool_calls) for m in parsed.messages
    ]
    return sum(counter.count(p) for p in parts if p)


async def models(request: Request) -> Response:
    if request.method != "GET":
        return _error("openai", 405, "/v1/models takes GET")
    key = await _get_key(_secret(request))
    if key is None:
        return _error("openai", 401, "missing or invalid API key", code="invalid_api_key")
    return _json(openai_api.models_list(key.client_models()))


ROUTES = {
    "/v1/chat/completions": chat_completions,
    "/v1/models": models,
    "/v1/messages": messages,
    "/v1/messages/count_tokens": count_tokens,
}
