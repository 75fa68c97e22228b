"""The gateway's endpoints: ``POST /v1/chat/completions``, ``POST /v1/responses`` (and
``/v1/responses/{id}``, ``/v1/responses/input_tokens``), ``GET /v1/models``,
``POST /v1/messages`` and ``POST /v1/messages/count_tokens``, served by
``GatewayRouter`` (``dashboard.gateway.asgi``) in front of the console's Django app. The
Conversations API's routes are in ``conversation_endpoints``.

Each endpoint authenticates the key (``Authorization: Bearer`` or ``x-api-key``), parses the
body into the provider-neutral request, and serves it in a thread of the gateway's pool (the
recall loop, the kernel and the Event Log are synchronous). Errors use the provider's shape:
OpenAI's ``{"error": {...}}`` on the OpenAI routes (Chat Completions and Responses),
Anthropic's ``{"type": "error", ...}`` on ``/v1/messages``. A streamed reply goes out as SSE
in the client's API as the upstream writes it (``SseEncoder``).
Every answer to a served request carries ``Server-Timing``: the laps of ``Stages``.
The serving thread hands the final reply back before it is committed and commits it once
the router has sent the answer (``Response.after``), the session still locked (see
``GatewayConversation.handle``'s ``answered``).
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import threading
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from functools import partial
from typing import Any, Protocol, TypeVar
from urllib.parse import parse_qs

from django.conf import settings
from django.db import close_old_connections

from dashboard.gateway import stored_conversations, stored_responses
from dashboard.gateway.asgi import Request, Response
from dashboard.gateway.models import GatewayKey
from dashboard.gateway.service import GatewayRefused, get_service, session_id_for_request
from dashboard.layer_outage import redis_unreachable
from dashboard.outage import RETRY_AFTER_S, database_unavailable
from scroll_core.errors import (
    ContextOverflow,
    ContextWindowUnfit,
    GatewayRequestInvalid,
    ModelError,
)
from scroll_core.gateway import (
    ClientMessage,
    ClientReply,
    ClientRequest,
    Stages,
    anthropic_api,
    compaction,
    openai_api,
    responses_api,
)
from scroll_core.gateway import _json as gateway_json
from scroll_core.gateway.responses_stream import ResponseEvents
from scroll_core.gateway.upstream import BETA_PARAM, OnBlock, OnText

T = TypeVar("T")
log = logging.getLogger("dashboard.gateway")
SESSION_HEADER = "X-Scroll-Session"
_SESSION_HEADER = SESSION_HEADER.lower()


def _json(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(status, _dumps(data), headers or {})


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
    409: "invalid_request_error",
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
    if exc.status == 529 or exc.code == "overloaded_error":
        # Overloaded: what each client's retry logic knows (Anthropic's 529, a 503 for OpenAI's).
        return _error(api, 529 if api == "anthropic" else 503, said, code="overloaded_error")
    if exc.status in (401, 403):
        # The client's key was fine; the gateway's key to the upstream was not.
        return _error(
            api, 502, f"{said} (the upstream refused the gateway's credentials)", code=exc.code
        )
    if 400 <= exc.status < 500:
        return _error(api, exc.status, said, code=exc.code)
    return _error(api, 502, said, code=exc.code or f"upstream_{exc.status}")


def _database_outage(api: str, what: str = "database") -> Response:
    """503 with Retry-After in the provider's shape: what the official clients retry."""
    message = f"the gateway cannot reach its {what} right now; retry shortly"
    if api == "anthropic":
        answer = _anthropic_error(503, message)  # overloaded_error: the SDK retries it
    else:
        answer = _openai_error(
            503, message, kind="service_unavailable", code=f"{what.lower()}_unavailable"
        )
    answer.headers["Retry-After"] = str(RETRY_AFTER_S)
    return answer


def _api_of(request: Request) -> str:
    """The error shape a request's client reads: Anthropic's on ``/v1/messages``, and from
    a client that sends ``anthropic-version`` or ``x-api-key``; else OpenAI's."""
    anthropic = "anthropic-version" in request.headers or "x-api-key" in request.headers
    return "anthropic" if anthropic or request.path.startswith("/v1/messages") else "openai"


def unavailable(request: Request, exc: Exception) -> Response | None:
    """``GatewayRouter``'s ``failed``: an endpoint that met a database outage (the console's
    or the Event Log's), or Redis away (the limits web processes share), answers 503 in its
    provider's shape; anything else is raised on."""
    if database_unavailable(exc):
        return _database_outage(_api_of(request))
    if redis_unreachable(exc):
        return _database_outage(_api_of(request), "Redis")
    return None


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


async def _posted(request: Request, api: str) -> tuple[GatewayKey, Any] | Response:
    """The key and the decoded body of a POST to one of the keyed endpoints that serve no
    model call, or the answer refusing it (405, 401, or 400 when the body is not JSON)."""
    if request.method != "POST":
        return _error(api, 405, f"{request.path} takes POST")
    key = await _get_key(_secret(request))
    if key is None:
        code = "invalid_api_key" if api == "openai" else None
        return _error(api, 401, "missing or invalid API key", code=code)
    body, refused = _body(request, api)
    if refused is not None:
        return refused
    return key, body


def _body(request: Request, api: str) -> tuple[Any, Response | None]:
    """The decoded JSON body (its size was checked when it was read)."""
    try:
        return gateway_json.loads(request.body or b"null"), None
    except (ValueError, UnicodeDecodeError) as exc:
        return None, _error(api, 400, f"the body is not JSON: {exc}", param="body")


def _serve_sync(
    key: GatewayKey,
    parsed: ClientRequest,
    session: str | None,
    stages: Stages,
    on_text: OnText | None,
    answered: Callable[[ClientReply], None],
    on_block: OnBlock | None = None,
) -> ClientReply:
    stages.lap("hop")
    service = get_service()
    try:
        return service.serve(
            key, parsed, session, stages=stages, on_text=on_text, answered=answered,
            on_block=on_block,
        )  # fmt: skip
    finally:
        close_old_connections()  # this pool's threads outlive requests; their connections not


_threads: ThreadPoolExecutor | None = None
# A serving thread waits at most this long for its answer to be sent before it commits the
# reply anyway (the router signals at once; this only bounds a response that never went).
SENT_TIMEOUT_S = 60.0


def _pool() -> ThreadPoolExecutor:
    """The gateway's own thread pool: the loop's default executor has a handful of threads,
    and each request holds one while its upstream answers."""
    global _threads
    if _threads is None:
        _threads = ThreadPoolExecutor(
            max_workers=settings.SCROLL_GATEWAY_THREADS, thread_name_prefix="gateway"
        )
    return _threads


async def _in_pool(fn: Callable[..., T], *args: Any) -> T:
    """Run ``fn`` in a thread of the gateway's pool (see ``_pool``)."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_pool(), contextvars.copy_context().run, fn, *args)


async def _serve(
    key: GatewayKey,
    parsed: ClientRequest,
    session: str | None,
    stages: Stages,
    sent: threading.Event,
    on_text: OnText | None = None,
    on_block: OnBlock | None = None,
) -> ClientReply:
    """The reply, as soon as it is final: the serving thread hands it over, then waits for
    ``sent`` (set once the answer has left) and commits the reply, the session still locked,
    so the answer does not wait for the commit (see ``GatewayConversation.handle``)."""
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[ClientReply] = loop.create_future()

    def settle(reply: ClientReply | None, exc: BaseException | None) -> None:  # on the loop
        if answer.done():
            return
        if exc is not None:
            answer.set_exception(exc)
        else:
            answer.set_result(reply)  # type: ignore[arg-type]

    def answered(reply: ClientReply) -> None:  # in the serving thread
        loop.call_soon_threadsafe(settle, reply, None)
        sent.wait(SENT_TIMEOUT_S)

    def work() -> None:
        reply: ClientReply | None = None
        failure: BaseException | None = None
        try:
            reply = _serve_sync(key, parsed, session, stages, on_text, answered, on_block)
        except BaseException as exc:
            failure = exc
        try:
            loop.call_soon_threadsafe(settle, reply, failure)  # a no-op once answered
        except RuntimeError:  # the server's loop closed meanwhile
            log.warning("gateway: the server stopped before a request's answer was sent")

    _pool().submit(contextvars.copy_context().run, work)
    reply = await answer
    stages.lap("hop_back")
    return reply


def _failure(api: str, exc: BaseException) -> Response:
    """A request that could not be served, in the provider's error shape."""
    if isinstance(exc, GatewayRequestInvalid):
        return _error(api, 400, str(exc), param=exc.param)
    if isinstance(exc, GatewayRefused):
        refused = _error(api, exc.status, exc.message, code=exc.code or None)
        if exc.retry_after:
            refused.headers["Retry-After"] = f"{exc.retry_after:.0f}"
        return refused
    if isinstance(exc, ModelError):
        return _upstream_error(api, exc)
    if isinstance(exc, ContextWindowUnfit):
        return _error(api, 400, str(exc), code="context_length_exceeded")
    if database_unavailable(exc):  # a stream's error event too (the router answers the rest)
        return _database_outage("anthropic" if api == "anthropic" else "openai")
    raise exc


async def _handle(
    request: Request,
    api: str,
    parse: Callable[[Any], ClientRequest],
    *,
    compacting: bool = False,
) -> Response:
    if request.method != "POST":
        return _error(api, 405, f"{request.path} takes POST")
    stages = Stages(began=request.received or None)
    stages.lap("read")
    key = await _get_key(_secret(request))
    if key is None:
        return _error(api, 401, "missing or invalid API key", code="invalid_api_key")
    stages.lap("auth")
    body, refused = _body(request, api)
    if refused is not None:
        return refused
    stages.lap("body")
    session = request.headers.get(_SESSION_HEADER)
    sent = threading.Event()  # the answer left: the serving thread may commit the reply
    try:
        parsed = parse(body)
        beta = request.headers.get("anthropic-beta") if api == "anthropic" else None
        if beta:  # forwarded to an Anthropic-format upstream (see anthropic_api)
            parsed.params[BETA_PARAM] = beta
        stages.lap("parse")
        if parsed.compact:
            return await _compacted(api, key, parsed, session, stages, whole=compacting)
        if parsed.stream:
            return await _streamed(api, key, parsed, session, stages, sent)
        reply = await _serve(key, parsed, session, stages, sent)
        headers = {SESSION_HEADER: reply.stats.session_id}
        data = _whole_reply(api, parsed, reply)
        response = _json(data, headers=headers)
    except (GatewayRequestInvalid, GatewayRefused, ModelError, ContextWindowUnfit) as exc:
        sent.set()
        return _failure(api, exc)
    except BaseException:
        sent.set()
        raise
    stages.lap("encode")
    response.headers["Server-Timing"] = _server_timing(stages)
    response.after = sent.set
    return response


def _compact_sync(
    key: GatewayKey, parsed: ClientRequest, session: str | None, stages: Stages
) -> tuple[str, ClientReply]:
    stages.lap("hop")
    try:
        return get_service().compact(key, parsed, session, stages=stages)
    finally:
        close_old_connections()


async def _compacted(
    api: str,
    key: GatewayKey,
    parsed: ClientRequest,
    session: str | None,
    stages: Stages,
    *,
    whole: bool,
) -> Response:
    """A remote compaction's answer (``scroll_core.gateway.compaction``): ``whole``, what
    ``POST /v1/responses/compact`` returns (v1); else a response whose one output item is the
    compaction (v2), or for an Anthropic client a message of one ``compaction`` block,
    streamed when asked."""
    handle, reply = await _in_pool(_compact_sync, key, parsed, session, stages)
    stages.lap("hop_back")
    headers = _timed({SESSION_HEADER: reply.stats.session_id}, stages)
    if api == "anthropic":
        if not parsed.stream:
            return _json(anthropic_api.compaction_message(parsed.model, handle, reply), 200,
                         headers)  # fmt: skip
        framed = MessagesSse(parsed)._encode(
            anthropic_api.compaction_events(parsed.model, handle, reply)
        )

        async def message_events() -> AsyncIterator[bytes]:
            yield framed

        return _sse(message_events(), headers)
    item_id = responses_api.item_id(parsed.response_id, "cmp", 0)
    if whole:
        return _json(compaction.compaction_object(parsed, handle, item_id), headers=headers)
    item = compaction.compaction_item(item_id, handle)
    if not parsed.stream:
        body = responses_api.response_object(
            parsed, response_id=parsed.response_id, created_at=parsed.created_at,
            status="completed", output=[item], reply=reply,
        )  # fmt: skip
        return _json(body, headers=headers)
    sse = ResponsesSse(parsed)
    data = sse.start() + sse._encode(sse.responses.compaction(item, reply))

    async def events() -> AsyncIterator[bytes]:
        yield data

    return _sse(events(), headers)


def _whole_reply(api: str, parsed: ClientRequest, reply: ClientReply) -> dict[str, Any]:
    """A reply that was not streamed, in the client's API."""
    if api == "anthropic":
        return anthropic_api.message_object(reply)
    if api == "responses":
        return responses_api.whole_response(parsed, reply)
    return openai_api.chat_completion(reply)


def _server_timing(stages: Stages) -> str:
    """Server-Timing: the view's laps (upstream calls included) and ``scroll``, their sum,
    so a client or the bench can tell them from the HTTP and framework time around them."""
    return f"{stages.header()}, scroll;dur={stages.total():.2f}"


def _timed(headers: dict[str, str], stages: Stages) -> dict[str, str]:
    return {**headers, "Server-Timing": _server_timing(stages)}


async def _streamed(
    api: str,
    key: GatewayKey,
    parsed: ClientRequest,
    session: str | None,
    stages: Stages,
    sent: threading.Event,
) -> Response:
    """Serve a streaming client: its text goes out as the upstream writes it, and so do its
    own tool calls and, for an Anthropic client, the thinking blocks (see
    ``GatewayConversation.handle``). The response starts with the first piece of either or
    when the reply is done, so a request that fails before then still gets its error
    status; a failure after that ends the stream with an error event."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()

    def on_text(piece: str) -> None:  # in the serving thread
        loop.call_soon_threadsafe(queue.put_nowait, ("text", piece))

    def on_block(kind: str, part: dict[str, Any] | None) -> None:  # in the serving thread
        loop.call_soon_threadsafe(queue.put_nowait, ("block", (kind, part)))

    async def run() -> None:
        try:
            reply = await _serve(key, parsed, session, stages, sent, on_text, on_block)
        except Exception as exc:
            queue.put_nowait(("error", exc))
        else:
            # Queued after every piece of text: the thread's callbacks run in order.
            queue.put_nowait(("done", reply))

    task = asyncio.create_task(run())
    first = await queue.get()
    if first[0] == "error":
        sent.set()
        await task
        return _failure(api, first[1])
    encoder = SseEncoder.for_api(api, parsed)
    headers = {SESSION_HEADER: session_id_for_request(key, parsed, session)}
    stages.lap("first_text")

    async def events() -> AsyncIterator[bytes]:
        # Everything queued by the time the loop gets to it goes out in one write: the start
        # with the first piece, and any pieces that arrived meanwhile (each write is a send
        # through the server and a read for the client; none is held back to wait for more).
        item, sent = first, ""
        out = [encoder.start()]
        while True:
            kind, value = item
            if kind == "text":
                sent += value
                out.append(encoder.text(value))
            elif kind == "block":
                out.append(encoder.block(*value))
            elif kind == "done":
                # A replayed reply (a retry) was never streamed: its text goes out here.
                rest = value.content[len(sent) :] if value.content.startswith(sent) else ""
                out.append(encoder.end(value, rest))
                yield b"".join(out)
                return
            else:
                out.append(encoder.error(_mid_stream_failure(api, value)))
                yield b"".join(out)
                return
            if queue.empty():
                yield b"".join(out)
                out = []
                item = await queue.get()
            else:
                item = queue.get_nowait()
        await task  # pragma: no cover (both endings return)

    response = _sse(events(), _timed(headers, stages))
    response.keep = task  # the serving task lives as long as its stream
    response.after = sent.set
    return response


def _mid_stream_failure(api: str, exc: BaseException) -> Response:
    try:
        return _failure(api, exc)
    except Exception:
        log.exception("gateway: a streamed request failed")
        return _error(api, 500, f"the gateway failed: {type(exc).__name__}")


def _sse(events: AsyncIterator[bytes], headers: dict[str, str]) -> Response:
    headers = {**headers, "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return Response(200, events, headers, content_type="text/event-stream")


class _Events(Protocol):
    """What an API's stream maker gives for each part of a reply (chunks or events)."""

    def start(self) -> list[Any]: ...

    def text(self, piece: str) -> list[Any]: ...

    def block(self, kind: str, part: dict[str, Any] | None) -> list[Any]: ...


class SseEncoder(ABC):
    """One streamed reply as server-sent events in the client's API (each method returns
    the bytes to send): ``events`` makes the API's chunks or events, ``_encode`` writes them.
    ``for_api`` picks the API's encoder."""

    events: _Events

    @abstractmethod
    def _encode(self, items: list[Any]) -> bytes:
        """The bytes of these chunks or events, in the API's SSE framing."""

    def start(self) -> bytes:
        return self._encode(self.events.start())

    def text(self, piece: str) -> bytes:
        return self._encode(self.events.text(piece))

    def block(self, kind: str, part: dict[str, Any] | None) -> bytes:
        """A thinking or tool call block as it streams."""
        return self._encode(self.events.block(kind, part))

    @abstractmethod
    def end(self, reply: ClientReply, rest: str = "") -> bytes:
        """The end of the stream; ``rest``: text of the reply not sent yet."""

    @abstractmethod
    def error(self, failure: Response) -> bytes:
        """The stream's last event, for a request that failed after it began."""

    @staticmethod
    def for_api(api: str, parsed: ClientRequest) -> SseEncoder:
        if api == "anthropic":
            return MessagesSse(parsed)
        if api == "responses":
            return ResponsesSse(parsed)
        return ChatSse(parsed)


class ChatSse(SseEncoder):
    """Chat Completions chunks, ``data:`` lines ending in ``data: [DONE]`` (thinking has no
    place in a chunk and is left out)."""

    def __init__(self, parsed: ClientRequest) -> None:
        self.include_usage = parsed.include_usage
        self.events = self.chunks = openai_api.ChunkStream(parsed.model)

    def _encode(self, items: list[Any]) -> bytes:
        return b"".join(b"data: " + _dumps(c) + b"\n\n" for c in items)

    def end(self, reply: ClientReply, rest: str = "") -> bytes:
        head = b"".join(self.text(piece) for piece in openai_api.pieces(rest))
        tail = self._encode(self.chunks.end(reply, include_usage=self.include_usage))
        return head + tail + b"data: [DONE]\n\n"

    def error(self, failure: Response) -> bytes:
        return b"data: " + _failure_body(failure) + b"\n\n"


class MessagesSse(SseEncoder):
    """Anthropic Messages events, each named in its ``event:`` line."""

    def __init__(self, parsed: ClientRequest) -> None:
        self.events = self.messages = anthropic_api.EventStream(parsed.model)

    def _encode(self, items: list[Any]) -> bytes:
        return b"".join(f"event: {e}\ndata: ".encode() + _dumps(d) + b"\n\n" for e, d in items)

    def end(self, reply: ClientReply, rest: str = "") -> bytes:
        return self._encode(self.messages.end(reply, rest))

    def error(self, failure: Response) -> bytes:
        return b"event: error\ndata: " + _failure_body(failure) + b"\n\n"


class ResponsesSse(SseEncoder):
    """Responses API events, each named in its ``event:`` line by its type; a failure after
    the stream began is ``response.failed`` with the error's code and message."""

    def __init__(self, parsed: ClientRequest) -> None:
        self.events = self.responses = ResponseEvents(parsed)

    def _encode(self, items: list[Any]) -> bytes:
        return b"".join(f"event: {e['type']}\ndata: ".encode() + _dumps(e) + b"\n\n" for e in items)

    def end(self, reply: ClientReply, rest: str = "") -> bytes:
        return self._encode(self.responses.end(reply, rest))

    def error(self, failure: Response) -> bytes:
        said = json.loads(_failure_body(failure)).get("error") or {}
        error = {"code": said.get("code") or said.get("type") or "api_error",
                 "message": said.get("message") or "the request failed"}  # fmt: skip
        return self._encode(self.responses.failed(error))


def _failure_body(failure: Response) -> bytes:
    return failure.body if isinstance(failure.body, bytes) else b"{}"


def _dumps(data: Any) -> bytes:
    return gateway_json.dumps(data)


# -- the endpoints -------------------------------------------------------------------------
async def chat_completions(request: Request) -> Response:
    return await _handle(request, "openai", openai_api.parse_chat_request)


async def responses(request: Request) -> Response:
    return await _handle(request, "responses", responses_api.parse_responses_request)


async def responses_compact(request: Request) -> Response:
    """``POST /v1/responses/compact`` (remote compaction v1): see ``_compacted``."""
    parse = partial(responses_api.parse_responses_request, compacting=True)
    return await _handle(request, "responses", parse, compacting=True)


def _stored_call(fn: Callable[..., T], *args: Any) -> T:
    try:
        return fn(*args)
    finally:
        close_old_connections()  # this pool's threads outlive requests; their connections not


async def _conversation_of(
    found: Any, *, through: bool = False
) -> list[tuple[int, ClientMessage]] | Response:
    """The stored reply's conversation (``stored_responses.conversation_of``), or the
    answer refusing it. The answer leaves before the reply's commit, so a read that misses
    the reply is made again once its session serves no request."""
    read = partial(stored_responses.conversation_of, found, through=through)
    conversation = await _in_pool(_stored_call, read)
    if conversation is None:
        try:
            conversation = await _in_pool(_settled, found.session_id, read)
        except GatewayRefused as exc:
            return _failure("openai", exc)
    if conversation is None:
        message = (
            f"response {found.response_id!r} is not in the log of its session (its reply was "
            "never committed)"
        )
        return _error("openai", 404, message, code="response_not_found")
    return conversation


def _settled(session_id: str, read: Callable[[], T]) -> T:
    return get_service().once_idle(session_id, partial(_stored_call, read))


def _not_stored(response_id: str) -> Response:
    message = (
        f"no stored response {response_id!r} for this key (it was made with store: false, "
        f"deleted, or is older than {settings.SCROLL_GATEWAY_RESPONSE_DAYS} days)"
    )
    return _error("openai", 404, message, code="response_not_found")


async def stored_response(request: Request) -> Response:
    """``/v1/responses/{id}``: ``GET`` retrieves a stored response (as the client got it
    whole), ``DELETE`` forgets it (the conversation stays in the Event Log; the id stops
    resolving), ``POST .../cancel`` is refused (the gateway runs no background responses)
    and ``GET .../input_items`` lists its input, earlier turns included, read back from the
    log. A key finds only its own agent's responses."""
    key = await _get_key(_secret(request))
    if key is None:
        return _error("openai", 401, "missing or invalid API key", code="invalid_api_key")
    response_id, _, action = request.path.removeprefix("/v1/responses/").partition("/")
    found = await _in_pool(_stored_call, stored_responses.find, key, response_id)
    if found is None:
        return _not_stored(response_id)
    allowed = {"": ("GET", "DELETE"), "cancel": ("POST",), "input_items": ("GET",)}.get(action)
    if allowed is None:
        return _error("openai", 404, f"{request.path}: no such endpoint", code="not_found")
    if request.method not in allowed:
        return _error("openai", 405, f"{request.path} takes {' or '.join(allowed)}")
    if action == "cancel":
        message = "only a background response can be cancelled; this gateway runs none"
        return _error("openai", 400, message, param="response_id")
    if action == "input_items":
        return await _input_items(request, found)
    if request.method == "DELETE":
        await _in_pool(_stored_call, stored_responses.forget, key, response_id)
        return _json({"id": response_id, "object": "response.deleted", "deleted": True})
    return _json(found.response)


async def _input_items(request: Request, found: Any) -> Response:
    """A page of a stored response's input items (``order``, ``limit``, ``after``)."""
    query = {k: v[-1] for k, v in parse_qs(request.query).items()}
    try:
        limit = int(query.get("limit", "20"))
    except ValueError:
        return _error("openai", 400, "limit: must be an integer", param="limit")
    conversation = await _conversation_of(found)
    if isinstance(conversation, Response):
        return conversation
    items = responses_api.input_items(conversation)
    try:
        page = responses_api.item_page(
            items, order=query.get("order", "desc"), limit=limit, after=query.get("after")
        )
    except GatewayRequestInvalid as exc:
        return _error("openai", 400, str(exc), param=exc.param)
    return _json(page)


async def messages(request: Request) -> Response:
    return await _handle(request, "anthropic", anthropic_api.parse_messages_request)


async def count_tokens(request: Request) -> Response:
    """``POST /v1/messages/count_tokens``: the tokens of the history as the client sent it
    (Scroll sends upstream less; the ``scroll`` field of each reply says how much)."""
    posted = await _posted(request, "anthropic")
    if isinstance(posted, Response):
        return posted
    _, body = posted
    try:
        parsed = anthropic_api.parse_messages_request(body, counting=True)
    except GatewayRequestInvalid as exc:
        return _error("anthropic", 400, str(exc), param=exc.param)
    return _json({"input_tokens": await _in_pool(_client_tokens, parsed)})


async def response_input_tokens(request: Request) -> Response:
    """``POST /v1/responses/input_tokens``: the tokens of the input as the client would send
    it, as ``count_tokens`` counts a Messages request. A ``previous_response_id`` counts the
    stored conversation through that response too, and a ``conversation`` its items, as the
    request continuing from them would carry them (instructions are not carried over)."""
    posted = await _posted(request, "openai")
    if isinstance(posted, Response):
        return posted
    key, body = posted
    try:
        parsed = responses_api.parse_responses_request(body, counting=True)
    except GatewayRequestInvalid as exc:
        return _error("openai", 400, str(exc), param=exc.param)
    if parsed.previous_response_id:
        previous = parsed.previous_response_id
        found = await _in_pool(_stored_call, stored_responses.find, key, previous)
        if found is None:
            return _not_stored(previous)
        before = await _conversation_of(found, through=True)
        if isinstance(before, Response):
            return before
        parsed = replace(parsed, messages=(*(m for _, m in before), *parsed.messages))
    elif parsed.conversation_id:
        try:
            held = await _in_pool(_stored_call, _conversation_items, key, parsed.conversation_id)
        except (GatewayRequestInvalid, GatewayRefused) as exc:
            return _failure("openai", exc)
        parsed = replace(parsed, messages=(*held, *parsed.messages))
    tokens = await _in_pool(_client_tokens, parsed)
    return _json({"object": "response.input_tokens", "input_tokens": tokens})


def _conversation_items(key: GatewayKey, conversation_id: str) -> list[ClientMessage]:
    """The messages of the key's conversation ``conversation_id`` (its items), read with its
    session held; refused, naming ``conversation``, when there is no such conversation."""
    found = stored_conversations.find(key, conversation_id)
    if found is None:
        raise GatewayRequestInvalid("conversation", stored_conversations.not_found(conversation_id))
    held = get_service().on_conversation(key, found.session_id, lambda conv: conv.items())
    return [message for _, message in held]


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


async def unknown_route(request: Request) -> Response:
    """Any other path under ``/v1/``: a 404 in the shape of the API the client speaks (an
    Anthropic client sends ``anthropic-version`` or ``x-api-key``), never the console's HTML
    page, which no client's error handling reads."""
    api = _api_of(request)
    return _error(api, 404, f"{request.method} {request.path}: no such endpoint", code="not_found")


# Routes ending in "/*" answer every path under them, the first that matches in this order.
# The conversations' routes (conversation_endpoints.ROUTES) go between these and FALLBACK.
ROUTES = {
    "/v1/chat/completions": chat_completions,
    "/v1/models": models,
    "/v1/responses": responses,
    "/v1/responses/input_tokens": response_input_tokens,
    "/v1/responses/compact": responses_compact,
    "/v1/responses/*": stored_response,
    "/v1/messages": messages,
    "/v1/messages/count_tokens": count_tokens,
}
# Matched after every other route: any other path under /v1/.
FALLBACK = {"/v1/*": unknown_route}
