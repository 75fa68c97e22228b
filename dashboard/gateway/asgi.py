"""The gateway's routes, answered straight from ASGI in front of the console's Django app.

Django would run every gateway request through the console's middleware (sessions, CSRF,
messages, CSP, htmx, ...): on its async path each ``MiddlewareMixin`` hops to a thread for
``process_request`` and again for ``process_response``, and the request's signals hop too -
about seventeen hops and a new thread per request, ~3 ms on an idle machine and far more on
a busy one, which alone is most of the gateway's latency budget. None of it applies to an
API authenticated by key. So ``GatewayRouter`` answers the ``ROUTES`` paths itself (reading
the body, calling the endpoint, sending its response or stream) and hands every other
request, and every WebSocket, to the console's application unchanged. Skipping Django skips
its host check too, so the router applies the same one (``host_check``) first. An
endpoint's exception goes to ``failed``, which may answer it (a database outage: a 503 in
the provider's shape) instead of the server's bare 500.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from scroll_core.store.outage_cap import outage_cap

__all__ = ["GatewayRouter", "Request", "Response", "read_body"]

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

# How long a gateway request waits for the Event Log's database in an outage before it is
# answered with a retryable 503 (the log's own budget, SCROLL_DB_OUTAGE_S, is for runs).
OUTAGE_WAIT_S = 2.0


class BodyTooLarge(Exception):
    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.size = size


@dataclass(frozen=True)
class Request:
    """What an endpoint sees of an HTTP request: header names are lower case."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes = b""
    received: float = 0.0  # time.perf_counter() when the request reached the router
    query: str = ""  # the query string, undecoded (``urllib.parse.parse_qs`` reads it)


@dataclass
class Response:
    """What an endpoint answers: a body, or an async stream of body pieces (sent as they
    come, for server-sent events)."""

    status: int
    body: bytes | AsyncIterator[bytes]
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "application/json"
    keep: Any = None  # held as long as the response (a stream's serving task)
    # Called once the response has been sent (or sending it failed): the serving thread
    # commits the reply after the answer left (see ``dashboard.gateway.endpoints``).
    after: Callable[[], None] | None = None


Endpoint = Callable[[Request], Awaitable[Response]]


async def read_body(receive: Receive, limit: int) -> bytes:
    """The whole request body; ``BodyTooLarge`` as soon as it passes ``limit`` bytes."""
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ConnectionAbortedError("the client went away while sending its body")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(size)
        parts.append(chunk)
        if not message.get("more_body"):
            return b"".join(parts)


async def send_response(send: Send, response: Response) -> None:
    headers = [(b"content-type", response.content_type.encode("latin-1"))]
    headers += [
        (name.lower().encode("latin-1"), value.encode("latin-1"))
        for name, value in response.headers.items()
    ]
    if isinstance(response.body, bytes):
        headers.append((b"content-length", str(len(response.body)).encode()))
        await send({"type": "http.response.start", "status": response.status, "headers": headers})
        await send({"type": "http.response.body", "body": response.body})
        return
    await send({"type": "http.response.start", "status": response.status, "headers": headers})
    try:
        async for piece in response.body:
            await send({"type": "http.response.body", "body": piece, "more_body": True})
    finally:
        await send({"type": "http.response.body", "body": b""})


class GatewayRouter:
    """An ASGI app: ``routes`` (path -> endpoint; a path ending in ``/*`` covers every path
    under it) answered here, the rest by ``app``.
    ``body_limit()`` is read per request (a test may change the setting)."""

    def __init__(
        self,
        app: Callable[[Scope, Receive, Send], Awaitable[None]],
        routes: Mapping[str, Endpoint],
        *,
        body_limit: Callable[[], int],
        too_large: Callable[[Request, int, int], Response],
        host_check: Any = None,
        failed: Callable[[Request, Exception], Response | None] | None = None,
    ) -> None:
        self.app = app
        self.routes = routes
        self.body_limit = body_limit
        self.too_large = too_large
        self.host_check = host_check  # allows(host) and refusal(request, host), or None
        # The answer to an endpoint's exception (a database outage's 503), or None: raised on.
        self.failed = failed
        # A route ending in "/*" answers every path under it.
        self.prefixes = [(path[:-1], e) for path, e in routes.items() if path.endswith("/*")]

    def _endpoint(self, path: str) -> Endpoint | None:
        endpoint = self.routes.get(path)
        if endpoint is None and self.prefixes:
            endpoint = next((e for prefix, e in self.prefixes if path.startswith(prefix)), None)
        return endpoint

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        endpoint = self._endpoint(scope["path"]) if scope["type"] == "http" else None
        if endpoint is None:
            await self.app(scope, receive, send)
            return
        received = time.perf_counter()
        headers: dict[str, str] = {}
        for raw_name, raw_value in scope.get("headers", ()):
            name = raw_name.decode("latin-1").lower()
            value = raw_value.decode("latin-1")
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        request = Request(scope["method"], scope["path"], headers)
        if self.host_check is not None:
            host = headers.get("host") or _server_host(scope)
            if not self.host_check.allows(host):
                await send_response(send, self.host_check.refusal(request, host))
                return
        limit = self.body_limit()
        try:
            declared = int(headers.get("content-length") or 0)
        except ValueError:
            declared = 0
        if declared > limit:
            await send_response(send, self.too_large(request, declared, limit))
            return
        try:
            body = await read_body(receive, limit)
        except BodyTooLarge as exc:
            await send_response(send, self.too_large(request, exc.size, limit))
            return
        except ConnectionAbortedError:
            return
        query = scope.get("query_string", b"").decode("latin-1")
        request = Request(request.method, request.path, headers, body, received, query)
        try:
            # A client is waiting: in a database outage, answer "retry later" within
            # OUTAGE_WAIT_S rather than hold the request for the log's whole budget.
            with outage_cap(OUTAGE_WAIT_S):
                response = await endpoint(request)
        except Exception as exc:
            answer = self.failed(request, exc) if self.failed is not None else None
            if answer is None:
                raise
            response = answer
        try:
            await send_response(send, response)
        finally:
            if response.after is not None:
                _after_written(response.after)


def _after_written(fn: Callable[[], None]) -> None:
    """Call ``fn`` once the server had a chance to write the response out: daphne (Twisted)
    only buffers in ``send`` and writes the bytes when the loop next finds the socket
    writable, so ``fn`` runs two loop turns later. ``fn`` starts the reply's commit in
    another thread; run at once, that thread took the interpreter while the loop still had
    the answer to write (~0.4 ms more between the handler and the client)."""
    loop = asyncio.get_running_loop()
    loop.call_soon(loop.call_soon, fn)


def _server_host(scope: Scope) -> str:
    """The host a request without a Host header reached (as Django's SERVER_NAME)."""
    server = scope.get("server") or ("", None)
    return f"{server[0]}:{server[1]}" if server[1] else str(server[0])
