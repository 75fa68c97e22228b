"""A loopback upstream for the gateway tests and bench, speaking OpenAI Chat Completions at
``.../v1/chat/completions`` and Anthropic Messages at ``.../v1/messages``: it records every
request it receives (and its path) and replies from a script (text, tool calls, errors, slow
replies). The ``a_*`` helpers script Anthropic replies; a streamed one goes out as Messages
events (message_start, ping, each block's start, deltas and stop, message_delta,
message_stop), or, with ``stream_error`` set, as message_start then that error event.

A request with ``stream: true`` gets its scripted completion as ``chat.completion.chunk``
events: the text in ``STREAM_PIECE``-character pieces, then each tool call (id and name,
then its arguments in two pieces), the finish reason, a usage chunk and ``[DONE]``. A reply
with ``hold`` set sends its first ``hold_after`` text pieces (Anthropic deltas of type
``hold_on``; tool call arguments pieces of a chunk stream when ``hold_on`` is
``"arguments"``) and waits for ``hold`` before the rest, and sets ``done`` once it sent
everything: a test sees what reached the client while the upstream was still writing, with
explicit markers rather than timing."""

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
    stream_error: dict[str, Any] | None = None  # an Anthropic error event after message_start
    hold_on: str = "text_delta"  # the deltas ``hold_after`` counts (or "arguments")


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
    content: str | None = None,
    tool_calls: list[dict] | None = None,
    *,
    prompt=120,
    out=12,
    cached: int | None = None,
) -> Reply:
    """A ``chat.completion``; ``cached``: the part of ``prompt`` the prompt cache served
    (``usage.prompt_tokens_details.cached_tokens``, left out when None)."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    usage: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": out,
        "total_tokens": prompt + out,
    }
    if cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
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
            "usage": usage,
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


def a_message(
    blocks: list[dict[str, Any]],
    stop_reason: str | None = None,
    *,
    prompt=120,
    out=12,
    cache_read: int | None = None,
    cache_write: int | None = None,
) -> Reply:
    """An Anthropic ``message`` reply with these content blocks; ``prompt`` is its
    ``input_tokens``, which leave out ``cache_read`` and ``cache_write`` (sent when given)."""
    calls = any(b["type"] == "tool_use" for b in blocks)
    usage: dict[str, Any] = {"input_tokens": prompt, "output_tokens": out}
    if cache_read is not None or cache_write is not None:
        usage["cache_creation_input_tokens"] = cache_write or 0
        usage["cache_read_input_tokens"] = cache_read or 0
    return Reply(
        200,
        {
            "id": "msg_up",
            "type": "message",
            "role": "assistant",
            "model": "claude-upstream",
            "content": blocks,
            "stop_reason": stop_reason or ("tool_use" if calls else "end_turn"),
            "stop_sequence": None,
            "usage": usage,
        },
    )


def a_thinking(thought: str, signature: str) -> dict[str, Any]:
    return {"type": "thinking", "thinking": thought, "signature": signature}


def a_text(content: str, **kw: Any) -> Reply:
    return a_message([{"type": "text", "text": f"{content}\n{HEADLINE}"}], **kw)


def a_tool_use(name: str, arguments: dict, call_id: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": arguments}


def a_error(status: int, kind: str, message: str) -> Reply:
    return Reply(status, {"type": "error", "error": {"type": kind, "message": message}})


def message_events(body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """A ``message`` body as the events a streaming Messages upstream sends."""
    head = {
        **body,
        "content": [],
        "stop_reason": None,
        # message_start carries the input counts, the cache's among them; output comes last.
        "usage": {**body["usage"], "output_tokens": 1},
    }
    out: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": head}),
        ("ping", {"type": "ping"}),
    ]
    for index, block in enumerate(body["content"]):
        if block["type"] == "text":
            start, text = {"type": "text", "text": ""}, block["text"]
            deltas = [
                {"type": "text_delta", "text": text[i : i + STREAM_PIECE]}
                for i in range(0, len(text), STREAM_PIECE)
            ]
        elif block["type"] == "thinking":
            start = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [
                {"type": "thinking_delta", "thinking": block["thinking"]},
                {"type": "signature_delta", "signature": block["signature"]},
            ]
        elif block["type"] == "redacted_thinking":
            start, deltas = block, []
        else:
            start = {**block, "input": {}}
            args = json.dumps(block["input"])
            half = len(args) // 2
            deltas = [
                {"type": "input_json_delta", "partial_json": p} for p in (args[:half], args[half:])
            ]
        out.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": start},
            )
        )
        out += [
            ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d})
            for d in deltas
        ]
        out.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    stop = {"stop_reason": body["stop_reason"], "stop_sequence": None}
    usage = {"output_tokens": body["usage"]["output_tokens"]}
    out.append(("message_delta", {"type": "message_delta", "delta": stop, "usage": usage}))
    out.append(("message_stop", {"type": "message_stop"}))
    return out


Item = Reply | Callable[[dict[str, Any]], Reply]


class ScriptedUpstream:
    """``ThreadingHTTPServer`` on 127.0.0.1:0; ``url`` ends in ``/v1``. With the script
    empty it answers with ``default`` (a callable of the request body) when given, else
    ``ok <n>`` with a headline."""

    def __init__(self, default: Callable[[dict[str, Any]], Reply] | None = None) -> None:
        self.default = default
        self.script: list[Item] = []
        self.requests: list[dict[str, Any]] = []
        self.raw: list[bytes] = []  # each request body exactly as it arrived
        self.headers: list[dict[str, str]] = []
        self.paths: list[str] = []
        self.release = threading.Event()  # set to cut every slow reply short
        self._lock = threading.Lock()
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                body = json.loads(raw or b"null")
                with upstream._lock:
                    upstream.raw.append(raw)
                    upstream.requests.append(body)
                    upstream.headers.append({k.lower(): v for k, v in self.headers.items()})
                    upstream.paths.append(self.path)
                    item = upstream.script.pop(0) if upstream.script else upstream.default
                    n = len(upstream.requests)
                anthropic = self.path.endswith("/messages")
                reply = item(body) if callable(item) else item
                if reply is None:
                    reply = a_text(f"ok {n}") if anthropic else text(f"ok {n}")
                if reply.delay:
                    upstream.release.wait(reply.delay)
                if body.get("stream") and reply.status == 200:
                    (self._events if anthropic else self._stream)(reply)
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
                texts = held = 0
                try:
                    for chunk in stream_chunks(reply.body):
                        delta = chunk["choices"][0]["delta"] if chunk["choices"] else {}
                        calls = delta.get("tool_calls") or ()
                        kind = (
                            "text_delta" if delta.get("content")
                            else "arguments" if any(c["function"].get("arguments") for c in calls)
                            else None
                        )  # fmt: skip
                        if kind == "text_delta":
                            if texts == reply.cut_after:
                                return  # the connection closes mid-reply
                            texts += 1
                        if kind == reply.hold_on:
                            if reply.hold is not None and held == reply.hold_after:
                                reply.hold.wait(30)
                            held += 1
                        self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                        self.wfile.flush()
                    self.wfile.write(b"data: [DONE]\n\n")
                    self.wfile.flush()
                    reply.done.set()
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def _events(self, reply: Reply) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("connection", "close")
                self.end_headers()
                self.close_connection = True
                events = message_events(reply.body)
                if reply.stream_error is not None:
                    events = [events[0], ("error", {"type": "error", "error": reply.stream_error})]
                texts = held = 0
                try:
                    for name, data in events:
                        kind = data.get("delta", {}).get("type")
                        if kind == "text_delta":
                            if texts == reply.cut_after:
                                return
                            texts += 1
                        if kind == reply.hold_on:
                            if reply.hold is not None and held == reply.hold_after:
                                reply.hold.wait(30)
                            held += 1
                        self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
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
        # Polled every 50 ms, not socketserver's 0.5 s: ``shutdown`` waits for the next poll,
        # and every gateway test closes one.
        self.thread = threading.Thread(
            target=self.server.serve_forever, args=(0.05,), name="upstream", daemon=True
        )
        self.thread.start()
        self.root = f"http://127.0.0.1:{self.server.server_address[1]}"  # Anthropic's base
        self.url = f"{self.root}/v1"

    def then(self, *items: Item) -> ScriptedUpstream:
        with self._lock:
            self.script.extend(items)
        return self

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
