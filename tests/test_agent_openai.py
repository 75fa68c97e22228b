"""The loop against a real OpenAI-compatible HTTP server on loopback, via the openai client."""

from __future__ import annotations

import json

import pytest
from agent_fakes import assert_no_orphans
from test_models_openai import ScriptedServer, completion, error_body

from scroll_core.agent import Session
from scroll_core.kernel import Kernel, KernelConfig
from scroll_core.models import OpenAICompatibleModel
from scroll_core.profile import Profile
from scroll_core.prompts import RECALL_TOOL, REPL_TOOL
from scroll_core.tokens import CharRatioCounter

S = "http-1"
HEADLINE = "⟦find the ferry | status: {}; next: answer | anchors: ferry, noon⟧"


@pytest.fixture
def server():
    s = ScriptedServer()
    yield s
    s.close()


@pytest.fixture
def model(server):
    m = OpenAICompatibleModel(
        "served-model",
        base_url=server.base_url,
        api_key="sk-test",
        context_size=4096,
        timeout=5.0,
        max_retries=1,
        backoff_s=0.0,
        env={},
        sleep=lambda s: None,
    )
    yield m
    m.close()


@pytest.fixture(scope="module")
def kernel():
    with Kernel(KernelConfig(sandbox="process")) as k:
        yield k


@pytest.fixture
def store_options():
    """The agent counts tokens with the char-ratio counter on either backend."""
    return {"token_counter": CharRatioCounter()}


@pytest.fixture
def clog(store):
    """The loop over HTTP runs on SQLite and on PostgreSQL."""
    log = store
    log.append(
        session_id="earlier",
        kind="context_msg",
        role="user",
        content="The ferry to the island leaves at noon on Sundays.",
    )
    yield log


def tool_call(call_id, name, code):
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps({"code": code})},
    }


def test_the_loop_drives_a_served_model_through_tool_calls_and_an_overflow(
    server, model, kernel, clog
):
    search = "for h in ms.search('ferry', k=3):\n    print(h.seq, h.snippet)"
    server.then(
        200,
        completion(
            "Searching.\n" + HEADLINE.format("searching"),
            tool_calls=[tool_call("call_1", RECALL_TOOL, search)],
            finish="tool_calls",
        ),
    )
    server.then(
        400,
        error_body("This model's maximum context length is 4096 tokens", "context_length_exceeded"),
    )
    server.then(200, completion("It leaves at noon on Sundays.\n" + HEADLINE.format("found")))
    profile = Profile(context_size=4096)
    with Session(clog, model, session_id=S, profile=profile, kernel=kernel) as agent:
        result = agent.ask("When does the ferry leave?")

    assert result.ok, result.error
    assert result.answer == "It leaves at noon on Sundays."
    assert result.headline == HEADLINE.format("found")
    assert len(server.requests) == 3
    first, overflowed, retried = server.requests
    assert [t["function"]["name"] for t in first["tools"]] == [REPL_TOOL, RECALL_TOOL]
    system = first["messages"][0]
    assert system["role"] == "system" and "ms.search" in system["content"]
    assert first["messages"][-1] == {"role": "user", "content": "When does the ferry leave?"}
    # The tool result came back over the wire paired with the call; the headline was stripped
    # from the assistant message the model sees again.
    for request in (overflowed, retried):
        assert_no_orphans(request["messages"])
        (tool,) = [m for m in request["messages"] if m["role"] == "tool"]
        assert tool["tool_call_id"] == "call_1" and "noon on Sundays" in tool["content"]
        assistant = next(m for m in request["messages"] if m["role"] == "assistant")
        assert assistant["content"] == "Searching."
        assert assistant["tool_calls"][0]["function"]["name"] == RECALL_TOOL
    step1, step2 = result.steps
    assert step1.model_call.input_tokens == 123 and step1.model_call.output_tokens == 45
    assert step1.model_call.model == "served-model-0613"
    assert [m.error_kind for m in step2.model_calls] == ["context_overflow", None]
    assert "maximum context length" in step2.model_calls[0].error
    assert any(c.reason == "overflow" and c.record.forced for c in step2.compressions)
    assert step1.tools[0].ms_calls[0].name == "search"


def test_malformed_arguments_from_the_server_are_told_to_the_model(server, model, kernel, clog):
    bad = {"id": "call_b", "type": "function", "function": {"name": REPL_TOOL, "arguments": "{"}}
    server.then(200, completion(None, tool_calls=[bad], finish="tool_calls"))
    server.then(200, completion("Sorry, I will write valid JSON next time."))
    with Session(clog, model, session_id=S, kernel=kernel) as agent:
        result = agent.ask("run something")
    assert result.ok
    tool = next(m for m in server.requests[1]["messages"] if m["role"] == "tool")
    assert tool["tool_call_id"] == "call_b" and tool["content"].startswith("error: the arguments")
    # The call goes back as the model wrote it, so the transcript stays truthful.
    call = next(m for m in server.requests[1]["messages"] if m.get("tool_calls"))
    assert call["tool_calls"][0]["id"] == "call_b"


def test_a_server_error_stops_the_turn_with_the_provider_message(server, model, kernel, clog):
    server.then(500, error_body("the GPU fell over", kind="server_error"))
    server.then(500, error_body("the GPU fell over", kind="server_error"))
    with Session(clog, model, session_id=S, kernel=kernel) as agent:
        result = agent.ask("hello")
    assert result.stop_reason == "model_error"
    assert "HTTP 500" in result.error and "the GPU fell over" in result.error
