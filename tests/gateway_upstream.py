"""A loopback OpenAI-compatible upstream for the gateway tests and bench: it records every
request it receives and replies from a script (text, tool calls, errors, slow replies)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HEADLINE = "⟦gateway test | status: answered; next: wait | anchors: test⟧"


@dataclass
class Reply:
    """One scripted answer: a status and a JSON body, sent after ``delay`` seconds."""

    status: int = 200
    body: Any = None
    delay: float = 0.0


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
                data = json.dumps(reply.body).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the gateway gave up waiting (the timeout test)

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
