"""A streamed upstream call leaves its connection to the pool, as a whole one does.

Providers stream over a kept-alive connection (chunked, TLS). The reply ends at ``[DONE]``
(Chat Completions) or ``message_stop`` (Messages) a few bytes before the body does; a client
that stops reading there and closes the response cannot hand the connection back, so every
streamed request through the gateway opened a new connection (a new TLS handshake to the
provider). A loopback server that streams as providers do counts the connections it accepts.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from scroll_core.errors import ModelError
from scroll_core.gateway.anthropic_upstream import http_upstream
from tests.gateway_upstream import a_text, message_events, stream_chunks, text


class KeptAliveUpstream:
    """Streams Chat Completions chunks or Messages events chunked over HTTP/1.1 keep-alive;
    ``connections`` counts the TCP connections accepted. With ``after_end`` set it writes one
    more SSE comment after the reply's end, before the body's end, as some proxies do; with
    ``cut_after`` set it ends the body after that many events, the reply unfinished."""

    def __init__(self, after_end: bytes = b"", cut_after: int | None = None) -> None:
        self.connections = 0
        self.cut_after = cut_after
        self.lock = threading.Lock()
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                with upstream.lock:
                    upstream.connections += 1

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                anthropic = self.path.endswith("/messages")
                if not body.get("stream"):
                    reply = (a_text if anthropic else text)("whole answer").body
                    data = json.dumps(reply).encode()
                    self.send_response(200)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                for i, event in enumerate(self._events(anthropic)):
                    if i == upstream.cut_after:
                        break
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")

            def _events(self, anthropic: bool) -> Iterator[bytes]:
                if anthropic:
                    for name, data in message_events(a_text("streamed answer").body):
                        yield f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
                else:
                    for chunk in stream_chunks(text("streamed answer").body):
                        yield b"data: " + json.dumps(chunk).encode() + b"\n\n"
                    yield b"data: [DONE]\n\n"
                if after_end:
                    yield after_end

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.root = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(params=[b"", b": keep-alive\n\n"], ids=["plain_end", "comment_after_end"])
def kept_alive(request):
    upstream = KeptAliveUpstream(after_end=request.param)
    yield upstream
    upstream.close()


@pytest.mark.parametrize("fmt", ["openai", "anthropic"])
def test_streamed_calls_reuse_one_connection_like_whole_ones(kept_alive, fmt):
    base = kept_alive.root + ("/v1" if fmt == "openai" else "")
    client = http_upstream(fmt, base, api_key="k")
    pieces: list[str] = []
    replies = []
    ask = [{"role": "user", "content": "hi"}]
    try:
        for _ in range(3):
            replies.append(client.complete(ask, [], model="m", params={}, on_text=pieces.append))
        streamed = kept_alive.connections
        for _ in range(2):
            replies.append(client.complete(ask, [], model="m", params={}))
    finally:
        client.close()
    assert [r.content.split("\n")[0] for r in replies] == ["streamed answer"] * 3 + [
        "whole answer"
    ] * 2
    assert "".join(pieces) == "".join(r.content for r in replies[:3])
    assert streamed == 1, f"{streamed} connections for 3 streamed calls"
    assert kept_alive.connections == 1  # the whole calls went over the same one


def test_a_stream_cut_before_its_end_is_still_an_error_and_the_next_call_works():
    """Reading on past the end is only for a reply that ended: one cut short keeps its error."""
    cut = KeptAliveUpstream(cut_after=2)
    client = http_upstream("openai", cut.root + "/v1")
    call = {"model": "m", "params": {}, "on_text": lambda _: None}
    try:
        with pytest.raises(ModelError, match="ended before the reply did"):
            client.complete([{"role": "user", "content": "hi"}], [], **call)
        cut.cut_after = None
        reply = client.complete([{"role": "user", "content": "hi"}], [], **call)
        assert reply.content.startswith("streamed answer")
    finally:
        client.close()
        cut.close()
