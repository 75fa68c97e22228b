"""The OpenAI-compatible model against a real HTTP server on loopback, through ``openai``."""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from scroll_core.errors import ConfigError, ContextOverflow, ModelError
from scroll_core.models import ChatModel, ModelReply, OpenAICompatibleModel, ToolCall
from scroll_core.models.openai_compat import DEFAULT_CONTEXT_SIZE, is_context_overflow


class ScriptedServer:
    """A /v1/chat/completions endpoint that answers from a script, one entry per request."""

    def __init__(self) -> None:
        self.script: deque[tuple[int, object, dict[str, str], float]] = deque()
        self.requests: list[dict] = []
        self.headers: list[dict[str, str]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                outer.requests.append({"path": self.path, **body})
                outer.headers.append({k.lower(): v for k, v in self.headers.items()})
                status, payload, headers, delay = outer.script.popleft()
                if delay:
                    time.sleep(delay)
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def then(self, status: int, payload: object, headers=None, delay: float = 0.0):
        self.script.append((status, payload, headers or {}, delay))
        return self

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


def completion(content=None, tool_calls=None, finish="stop", model="served-model-0613"):
    message = {"role": "assistant", "content": content}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1700000000,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 123, "completion_tokens": 45, "total_tokens": 168},
    }


def error_body(message, code=None, kind="invalid_request_error"):
    return {"error": {"message": message, "type": kind, "code": code, "param": None}}


@pytest.fixture
def server():
    s = ScriptedServer()
    yield s
    s.close()


@pytest.fixture
def make_model(server):
    models = []
    sleeps: list[float] = []

    def make(**kwargs):
        options = {
            "base_url": server.base_url,
            "api_key": "sk-test",
            "context_size": 32768,
            "timeout": 5.0,
            "max_retries": 2,
            "backoff_s": 0.01,
            "env": {},
            "sleep": lambda s: sleeps.append(s),
        }
        options.update(kwargs)
        model = OpenAICompatibleModel(kwargs.pop("model", "test-model"), **options)
        models.append(model)
        return model

    make.sleeps = sleeps
    yield make
    for model in models:
        model.close()


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "recall_history_python",
            "description": "run code",
            "parameters": {
                "type": "object",
                "properties": {"code": {"type": "string"}},
                "required": ["code"],
            },
        },
    }
]


def test_it_returns_text_usage_finish_reason_and_the_served_model_name(server, make_model):
    server.then(200, completion("Paris."))
    model = make_model()
    assert isinstance(model, ChatModel)
    reply = model.complete([{"role": "user", "content": "Where?"}], [])
    assert reply == ModelReply(
        content="Paris.",
        finish_reason="stop",
        model="served-model-0613",
        usage=reply.usage,
        attempts=1,
    )
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (123, 45)
    sent = server.requests[0]
    assert sent["path"] == "/v1/chat/completions"
    assert sent["model"] == "test-model"
    assert sent["messages"] == [{"role": "user", "content": "Where?"}]
    assert "tools" not in sent  # an empty tool list is not sent: some servers reject it
    assert server.headers[0]["authorization"] == "Bearer sk-test"


def test_it_sends_tools_and_parses_tool_calls_into_dicts(server, make_model):
    calls = [
        {
            "id": "call_abc",
            "type": "function",
            "function": {
                "name": "recall_history_python",
                "arguments": json.dumps({"code": "print(ms.search('zebra', k=5))"}),
            },
        },
        {
            "id": "call_def",
            "type": "function",
            "function": {"name": "repl_exec", "arguments": "{not json"},
        },
    ]
    server.then(200, completion(None, calls, finish="tool_calls"))
    messages = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "zebra?"},
    ]
    reply = make_model().complete(messages, TOOLS)
    assert reply.content == ""
    assert reply.finish_reason == "tool_calls"
    assert reply.tool_calls[0] == ToolCall(
        "call_abc",
        "recall_history_python",
        {"code": "print(ms.search('zebra', k=5))"},
        raw_arguments=calls[0]["function"]["arguments"],
    )
    bad = reply.tool_calls[1]
    assert bad.arguments == {} and bad.raw_arguments == "{not json"
    assert bad.arguments_error and "not JSON" in bad.arguments_error
    sent = server.requests[0]
    assert sent["tools"] == TOOLS and sent["tool_choice"] == "auto"
    # the reply goes back into the conversation as a plain assistant message
    message = reply.to_message()
    assert message["role"] == "assistant"
    assert [c["id"] for c in message["tool_calls"]] == ["call_abc", "call_def"]
    assert message["tool_calls"][1]["function"]["arguments"] == "{not json"


def test_a_tool_conversation_round_trips_through_the_server(server, make_model):
    server.then(200, completion("done"))
    messages = [
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [ToolCall("c1", "repl_exec", {"code": "print(1)"}).to_message()],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "1\n"},
    ]
    assert make_model().complete(messages, TOOLS).content == "done"
    assert server.requests[0]["messages"] == messages


def test_a_server_error_is_retried_with_backoff_then_succeeds(server, make_model):
    server.then(500, error_body("upstream hiccup", kind="server_error"))
    server.then(503, error_body("overloaded", kind="server_error"), {"retry-after-ms": "20"})
    server.then(200, completion("ok"))
    model = make_model()
    reply = model.complete([{"role": "user", "content": "hi"}], [])
    assert reply.content == "ok" and reply.attempts == 3
    assert len(server.requests) == 3
    # exponential from 0.01s; the provider's retry-after (20 ms) wins when it is longer
    assert make_model.sleeps == [0.01, 0.02]


def test_persistent_server_errors_surface_with_status_and_message(server, make_model):
    for _ in range(3):
        server.then(502, error_body("bad gateway upstream", kind="server_error"))
    with pytest.raises(ModelError) as caught:
        make_model(max_retries=2).complete([{"role": "user", "content": "hi"}], [])
    error = caught.value
    assert not isinstance(error, ContextOverflow)
    assert error.status == 502 and error.message.startswith("bad gateway upstream")
    assert "HTTP 502" in str(error) and "after 3 attempts" in str(error)
    assert len(server.requests) == 3


def test_a_client_error_is_not_retried(server, make_model):
    server.then(401, error_body("Incorrect API key provided", code="invalid_api_key"))
    with pytest.raises(ModelError) as caught:
        make_model().complete([{"role": "user", "content": "hi"}], [])
    assert caught.value.status == 401 and caught.value.code == "invalid_api_key"
    assert "Incorrect API key provided" in str(caught.value)
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    "body",
    [
        # OpenAI
        error_body(
            "This model's maximum context length is 8192 tokens. However, your messages "
            "resulted in 9000 tokens.",
            code="context_length_exceeded",
        ),
        # vLLM
        {
            "object": "error",
            "message": "This model's maximum context length is 4096 tokens. However, you "
            "requested 5000 tokens (4000 in the messages, 1000 in the completion).",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        },
        # llama.cpp server
        error_body(
            "the request exceeds the available context size, try increasing it",
            code=400,
            kind="exceed_context_size_error",
        ),
    ],
    ids=["openai", "vllm", "llama.cpp"],
)
def test_a_context_length_refusal_is_context_overflow_and_not_retried(server, make_model, body):
    server.then(400, body)
    with pytest.raises(ContextOverflow) as caught:
        make_model().complete([{"role": "user", "content": "x" * 100}], [])
    assert caught.value.status == 400
    assert isinstance(caught.value, ModelError)
    assert len(server.requests) == 1


def test_an_ordinary_bad_request_is_not_an_overflow(server, make_model):
    server.then(400, error_body("'messages' must contain at least one message"))
    with pytest.raises(ModelError) as caught:
        make_model().complete([], [])
    assert type(caught.value) is ModelError


def test_overflow_detection_by_code_and_text():
    assert is_context_overflow(400, "context_length_exceeded", "whatever")
    assert is_context_overflow(400, None, "prompt is too long: 210000 tokens > 200000 maximum")
    assert is_context_overflow(413, None, "Input is too long for requested model.")
    assert not is_context_overflow(500, None, "maximum context length")
    assert not is_context_overflow(400, None, "Invalid value for 'temperature'")


def test_a_timeout_is_a_clear_error(server, make_model):
    server.then(200, completion("late"), delay=1.5)
    with pytest.raises(ModelError, match=r"timed out after 0\.3s") as caught:
        make_model(timeout=0.3, max_retries=0).complete([{"role": "user", "content": "hi"}], [])
    assert caught.value.status is None


def test_an_unreachable_endpoint_is_retried_then_a_clear_error(make_model):
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    base = f"http://127.0.0.1:{port}/v1"
    with pytest.raises(ModelError, match="could not connect to") as caught:
        make_model(base_url=base, max_retries=1).complete([{"role": "user", "content": "x"}], [])
    assert base in str(caught.value) and "after 2 attempts" in str(caught.value)


def test_a_reply_without_choices_is_an_error(server, make_model):
    body = completion("x")
    body["choices"] = []
    server.then(200, body)
    with pytest.raises(ModelError, match="no choices"):
        make_model().complete([{"role": "user", "content": "x"}], [])


def test_settings_come_from_the_environment(server):
    env = {
        "SCROLL_MODEL_BASE_URL": server.base_url,
        "SCROLL_MODEL_API_KEY": "sk-env",
        "SCROLL_MODEL_NAME": "qwen-local",
        "SCROLL_MODEL_CONTEXT_SIZE": "131_072",
    }
    server.then(200, completion("from env"))
    with OpenAICompatibleModel(env=env, backoff_s=0) as model:
        assert (model.name, model.context_size) == ("qwen-local", 131072)
        assert model.complete([{"role": "user", "content": "hi"}], []).content == "from env"
    assert server.requests[0]["model"] == "qwen-local"
    assert server.headers[0]["authorization"] == "Bearer sk-env"


def test_a_local_server_needs_no_key_and_the_window_has_a_safe_default(server):
    server.then(200, completion("hi"))
    with OpenAICompatibleModel("llama", base_url=server.base_url, env={}) as model:
        assert model.context_size == DEFAULT_CONTEXT_SIZE
        model.complete([{"role": "user", "content": "hi"}], [])
    assert server.headers[0]["authorization"].startswith("Bearer ")


@pytest.mark.parametrize(
    ("kwargs", "env", "message"),
    [
        ({}, {}, "no model name"),
        ({"model": "m"}, {"SCROLL_MODEL_CONTEXT_SIZE": "lots"}, "whole number of tokens"),
        ({"model": "m", "context_size": 10}, {}, "at least 256"),
        ({"model": "m", "timeout": 0}, {}, "timeout must be positive"),
        ({"model": "m", "max_retries": -1}, {}, "max_retries"),
    ],
)
def test_bad_settings_are_refused_clearly(kwargs, env, message):
    with pytest.raises(ConfigError, match=message):
        OpenAICompatibleModel(env=env, **kwargs)
