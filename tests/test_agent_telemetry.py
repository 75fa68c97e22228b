"""The agent loop as spans: turns, model calls, compress, fold and evict, and the cell's ms
calls with the evicted block each expand read."""

from __future__ import annotations

import pytest
from agent_fakes import ScriptedModel, repl, reply
from test_agent_policy import (  # noqa: F401  (the planted-fact history, on both backends)
    S,
    history,
    store_options,
)

from scroll_core.agent import Session
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
    assert {attr(f, "scroll.mode") for f in folds} <= {"prefold", "live_fold"}
