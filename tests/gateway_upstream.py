"""A loopback OpenAI-compatible upstream for the gateway tests and bench: it records every
request it receives and replies from a script (text, tool calls, errors, slow replies).

A request with ``stream: true`` gets its scripted completion as ``chat.completion.chunk``
events: the text in ``STREAM_PIECE``-character pieces, then each tool call (id and name,
then its arguments in two pieces), the finish reason, a usage chunk and ``[DONE]``. A reply
with ``hold`` set sends its first ``hold_after`` text pieces and waits for ``hold`` before
the rest, and sets ``done`` once it sent everything: a test sees what reached the client while
the upstream was still writing, with explicit markers rather than timing."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HEADLINE = "⟦gateway test | status: answered; next: wait | anchors: test⟧"


STREAM_PIECE = 8


@dataclass
class Reply:
    """One scripted answer: a status and a JSON body, sent after ``delay`` seconds (for a
    streamed one, ``hold``/``hold_after``/``done``: see the module docstring)."""

    status: int = 200
    body: Any = None
    delay: float = 0.0
    hold: threading.Event | None = None
    hold_after: int = 1
    done: threading.Event = field(default_factory=threading.Event)  # the whole reply was sent
    cut_after: int | None = None  # a stream that dies after this many text pieces


def stream_chunks(body: dict[str, Any]) -> list[dict[str, Any]]:
    """A ``chat.completion`` body as the chunks a streaming upstream sends (before [DONE])."""
    base = {"id": body.get("id", "chatcmpl-up"), "object": "chat.completion.chunk",
            "created": 1, "model": body.get("model", "upstream-model")}  # fmt: skip
    choice = body["choices"][0]
    message = choice["message"]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    out = [chunk({"role": "assistant", "content": ""})]
    content = message.get("content") or ""
    out += [
        chunk({"content": content[i : i + STREAM_PIECE]})
        for i in range(0, len(content), STREAM_PIECE)
    ]
    for index, call in enumerate(message.get("tool_calls") or ()):
        head = {"index": index, "id": call["id"], "type": "function",
                "function": {"name": call["function"]["name"], "arguments": ""}}  # fmt: skip
        out.append(chunk({"tool_calls": [head]}))
        args = call["function"]["arguments"]
        half = len(args) // 2
        for part in (args[:half], args[half:]):
            out.append(chunk({"tool_calls": [{"index": index, "function": {"arguments": part}}]}))
    out.append(chunk({}, choice.get("finish_reason") or "stop"))
    out.append({**base, "choices": [], "usage": body.get("usage")})
    return out


def completion(
    content: str | None = None, tool_calls: list[dict] | None = None, *, prompt=120, out=12
) -> Reply:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return Reply(
        200,
        {
            "id": "chatcmpl-up",
            "object": "chat.completion",
            "created": 1,
            "model": "upstream-model",
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if tool_calls else "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": out,
                "total_tokens": prompt + out,
            },
        },
    )


def text(content: str, **kw: Any) -> Reply:
    return completion(f"{content}\n{HEADLINE}", **kw)


def tool_call(name: str, arguments: dict, call_id: str) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


def error(status: int, message: str, code: str | None = None) -> Reply:
    return Reply(status, {"error": {"message": message, "type": "upstream_error", "code": code}})


Item = Reply | Callable[[dict[str, Any]], Reply]


class ScriptedUpstream:
    """``ThreadingHTTPServer`` on 127.0.0.1:0; ``url`` ends in ``/v1``. With the script
    empty it answers ``ok <n>`` with a headline."""

    def __init__(self) -> None:
        self.script: list[Item] = []
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.release = threading.Event()  # set to cut every slow reply short
        self._lock = threading.Lock()
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"null")
                with upstream._lock:
                    upstream.requests.append(body)
                    upstream.headers.append({k.lower(): v for k, v in self.headers.items()})
                    item = upstream.script.pop(0) if upstream.script else None
                    n = len(upstream.requests)
                reply = item(body) if callable(item) else item
                if reply is None:
                    reply = text(f"ok {n}")
                if reply.delay:
                    upstream.release.wait(reply.delay)
                if body.get("stream") and reply.status == 200:
                    self._stream(reply)
                    return
                data = json.dumps(reply.body).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the gateway gave up waiting (the timeout test)

            def _stream(self, reply: Reply) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("connection", "close")
                self.end_headers()
                self.close_connection = True
                texts = 0
                try:
                    for chunk in stream_chunks(reply.body):
                        delta = chunk["choices"][0]["delta"] if chunk["choices"] else {}
                        if delta.get("content"):
                            if texts == reply.cut_after:
                                return  # the connection closes mid-reply
                            if reply.hold is not None and texts == reply.hold_after:
                                reply.hold.wait(30)
                            texts += 1
                        self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                        self.wfile.flush()
                    self.wfile.write(b"data: [DONE]\n\n")
                    self.wfile.flush()
                    reply.done.set()
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        # Joined on close (after ``release`` cut any slow reply short), so no handler outlives
        # its test holding a socket.
        self.server.daemon_threads = False
        self.thread = threading.Thread(
            target=self.server.serve_forever, name="upstream", daemon=True
        )
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def then(self, *items: Item) -> ScriptedUpstream:
        with self._lock:
            self.script.extend(items)
        return self

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
