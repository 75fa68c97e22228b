"""The agent loop as spans: turns, model calls, compress, fold and evict, and the cell's ms
calls with the evicted block each expand read."""

from __future__ import annotations

import json

import pytest
from agent_fakes import ScriptedModel, repl, reply
from test_agent_policy import (  # noqa: F401  (the planted-fact history, on both backends)
    S,
    history,
    store_options,
)

from scroll_core.agent import Session
from scroll_core.errors import ModelError
from scroll_core.kernel import Kernel, KernelConfig
from scroll_core.models import PolicyModel
from scroll_core.profile import Profile


@pytest.fixture(scope="module")
def kernel():
    with Kernel(KernelConfig(sandbox="process")) as k:
        yield k


def attr(record, key):
    return record.attributes.get(key)


def test_a_recall_turn_is_traced_from_turn_to_the_evicted_block_it_read(history, kernel, ring):  # noqa: F811
    profile = Profile(context_size=4096)
    with Session(
        history, PolicyModel(context_size=4096), session_id=S, profile=profile, kernel=kernel
    ) as agent:
        result = agent.ask("What is the name of Melanie's dog?")
    assert result.ok

    (turn,) = ring.records("scroll.turn")
    assert attr(turn, "scroll.stop_reason") == "answer"
    assert turn.session_id == S

    chats = ring.records("chat scroll-policy-baseline")
    assert len(chats) == len(result.steps)
    assert all(c.parent_id == turn.span_id for c in chats)
    assert all(attr(c, "gen_ai.operation.name") == "chat" for c in chats)
    assert attr(chats[-1], "scroll.headline_quality") == "ok"
    assert attr(chats[-1], "gen_ai.usage.input_tokens") > 0

    evict = ring.records("scroll.evict")[0]
    compress = next(c for c in ring.records("scroll.compress") if c.span_id == evict.parent_id)
    assert attr(compress, "scroll.action") == "evict"
    assert attr(compress, "gen_ai.conversation.compacted") is True
    assert attr(evict, "scroll.seq_lo") <= history.planted <= attr(evict, "scroll.seq_hi")
    block = attr(evict, "scroll.block")
    assert block.startswith("t0:")

    cell = ring.records("execute_tool recall_history_python")[0]
    expands = [e for e in ring.records("scroll.expand") if e.parent_id == cell.span_id]
    assert expands, "the recall cell's expand is a child of its span"
    assert any(block in (attr(e, "scroll.blocks") or []) for e in expands)


def test_folds_are_spans_with_what_they_saved(store, kernel, ring):
    script = []
    for k in range(8):
        script += [reply(f"Working on {k}.", repl(f"print('row {k}: ' + 'x' * 900)")), reply("ok")]
    model = ScriptedModel(*script, context_size=1024)
    with (
        Session(
            store,
            model,
            session_id="folds",
            profile=Profile(context_size=1024, protected_recent_tool_results=1),
            kernel=kernel,
            system="A test agent.",
        ) as agent,
    ):
        for k in range(8):
            assert agent.ask(f"Task {k}").ok
    folds = ring.records("scroll.fold")
    assert folds
    assert all(attr(f, "scroll.tokens_saved") > 0 for f in folds)
    # ``tail``: an eviction folding what stays of a long active turn over the tail.
    assert {attr(f, "scroll.mode") for f in folds} <= {"prefold", "live_fold", "tail"}


CONTENT_KEYS = ("gen_ai.input.messages", "gen_ai.output.messages", "input.value", "output.value")


def test_chat_spans_carry_no_message_content_unless_asked(store, ring, monkeypatch):
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    model = ScriptedModel(reply("The answer is 42."))
    with Session(store, model, session_id="quiet", system="A test agent.") as agent:
        assert agent.ask("What is the answer?").ok
    (chat,) = ring.records("chat scripted")
    assert attr(chat, "gen_ai.usage.input_tokens") == 100
    assert not [k for k in chat.attributes if k in CONTENT_KEYS or k.startswith("llm.")]


def test_with_capture_on_a_chat_span_holds_what_was_sent_and_what_came_back(
    store, ring, monkeypatch
):
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    model = ScriptedModel(reply("The answer is 42."))
    with Session(store, model, session_id="told", system="A test agent.") as agent:
        assert agent.ask("What is the answer?").ok
    (chat,) = ring.records("chat scripted")
    (sent,) = model.requests
    instructions = json.loads(attr(chat, "gen_ai.system_instructions"))
    assert instructions == [{"type": "text", "content": sent[0]["content"]}]
    assert "A test agent." in instructions[0]["content"]
    inputs = json.loads(attr(chat, "gen_ai.input.messages"))
    assert [m["role"] for m in inputs] == [m["role"] for m in sent[1:]]
    assert inputs[-1]["parts"][-1]["content"].endswith("What is the answer?")
    (output,) = json.loads(attr(chat, "gen_ai.output.messages"))
    assert output["finish_reason"] == "stop"
    assert output["parts"][0]["content"].startswith("The answer is 42.")
    assert attr(chat, "input.value") == attr(chat, "gen_ai.input.messages")
    assert attr(chat, "output.value") == attr(chat, "gen_ai.output.messages")
    assert attr(chat, "openinference.span.kind") == "LLM"
    assert attr(chat, "llm.model_name") == "scripted"
    assert attr(chat, "llm.token_count.total") == 110


def test_a_failed_call_still_shows_what_it_sent_and_a_long_one_is_cut_to_the_cap(
    store, ring, monkeypatch
):
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    monkeypatch.setenv("SCROLL_GENAI_CONTENT_MAX_BYTES", "2048")
    model = ScriptedModel(ModelError("the provider is down"), context_size=8192)
    with Session(store, model, session_id="failed", system="A test agent.") as agent:
        assert not agent.ask("Summarise this: " + "lorem ipsum " * 1000).ok
    (chat,) = ring.records("chat scripted")
    assert chat.status == "error"
    sent = attr(chat, "gen_ai.input.messages")
    assert len(sent.encode()) <= 2048 and attr(chat, "scroll.input_cut_bytes") > 10_000
    question = json.loads(sent)[-1]["parts"][-1]["content"]
    assert question.startswith("Summarise this: lorem") and "characters cut]…" in question
    assert attr(chat, "gen_ai.output.messages") is None
