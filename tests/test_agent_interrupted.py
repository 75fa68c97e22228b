"""No half turns: a turn its run could not finish is marked interrupted in the log, with the
seqs it left and a result for every call it left unanswered, so a later view and a replay
read a well-formed history that says what happened."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from agent_fakes import ScriptedModel, assert_no_orphans, repl, reply

from scroll_core.agent import Session
from scroll_core.agent.interrupted import INTERRUPTED_KEY, mark_interrupted
from scroll_core.kernel import Kernel, KernelConfig
from scroll_core.profile import Profile
from scroll_core.replay import load_trace, replay
from scroll_core.tokens import CharRatioCounter

S = "interrupted-1"


class Crash(Exception):
    """The run dying mid-turn (a fault past the outage budget, a stop)."""


class DyingKernel:
    """A kernel whose cells never report: the call is logged, its result never is."""

    def __init__(self, real):
        self.real = real

    def register(self, functions):
        self.real.register(functions)

    def execute(self, code, timeout=None, **options):
        raise Crash()


@pytest.fixture
def store_options():
    return {"token_counter": CharRatioCounter()}


@pytest.fixture(scope="module")
def kernel():
    with Kernel(KernelConfig(sandbox="process")) as k:
        yield k


def _session(log, model, kernel):
    return Session(log, model, session_id=S, kernel=kernel, profile=Profile(context_size=2048),
                   system="A test agent.")  # fmt: skip


def _half_turn(log, kernel) -> tuple[dict, list[int]]:
    """Turn 1 finished, turn 2 cut off after its model call; the checkpoint before turn 2
    and the seqs turn 2 left."""
    with _session(log, ScriptedModel(reply("step", repl("print(1)")), reply("done")),
                  kernel) as agent:  # fmt: skip
        agent.ask("task 0")
        saved = json.loads(json.dumps(agent.checkpoint()))
    model = ScriptedModel(reply("running", repl("print('never')", "call_cut")))
    resumed = Session.resume(saved, log, model, kernel=DyingKernel(kernel), system="A test agent.")
    with resumed as agent, pytest.raises(Crash):
        agent.ask("task 1")
    left = [e.seq for e in log.session_events(S, limit=None)][-3:]
    return saved, left


def test_a_half_turn_is_marked_with_the_seqs_it_left_and_its_calls_answered(store, kernel):
    saved, left = _half_turn(store, kernel)
    seqs = mark_interrupted(store, saved, "the run failed: the database did not answer")
    assert seqs == left
    events = store.session_events(S, limit=None)
    closing, marker = events[-2:]
    assert (closing.kind, closing.tool_call_id) == ("tool_result", "call_cut")
    assert closing.content.startswith("not run: the turn was interrupted")
    assert (marker.kind, marker.role) == ("context_msg", "system")
    assert marker.metadata[INTERRUPTED_KEY] == {
        "turn": 2, "seqs": left, "reason": "the run failed: the database did not answer"
    }  # fmt: skip
    assert "Turn 2 was interrupted" in marker.content and f"{left[0]}–{left[-1]}" in marker.content
    # Marking again (a retry after the log came back) stores nothing twice.
    assert mark_interrupted(store, saved, "again") == left
    assert (
        Counter(e.dedup_key for e in store.session_events(S, limit=None)).most_common(1)[0][1] == 1
    )


def test_a_finished_turn_is_not_marked(store, kernel):
    model = ScriptedModel(reply("step", repl("print(1)")), reply("done"))
    with _session(store, model, kernel) as agent:
        agent.ask("task 0")
        saved = json.loads(json.dumps(agent.checkpoint()))
    before = store.count(S)
    assert mark_interrupted(store, saved, "stopped") == []
    assert store.count(S) == before


def test_the_view_after_a_marked_turn_sends_no_call_without_its_result(store, kernel):
    saved, _ = _half_turn(store, kernel)
    mark_interrupted(store, saved, "the run was stopped")
    # A later run on the session builds its view from the log: the half turn is in it,
    # closed, and the model is told the turn was interrupted.
    later = ScriptedModel(reply("carrying on"))
    with _session(store, later, kernel) as agent:
        agent.ask("task 2")
    sent = later.requests[0]
    assert_no_orphans(sent)
    assert any("Turn 2 was interrupted" in str(m["content"]) for m in sent)


def test_an_unmarked_half_turn_would_send_a_call_without_its_result(store, kernel):
    # What the mark prevents: the same history left open gives the provider an orphan call.
    _half_turn(store, kernel)
    later = ScriptedModel(reply("carrying on"))
    with _session(store, later, kernel) as agent:
        agent.ask("task 2")
    with pytest.raises(AssertionError, match="calls without results"):
        assert_no_orphans(later.requests[0])


def test_replay_reads_a_marked_turn_as_the_view_did(store, kernel):
    saved, _ = _half_turn(store, kernel)
    mark_interrupted(store, saved, "the run was stopped")
    later = ScriptedModel(reply("carrying on"))
    with _session(store, later, kernel) as agent:
        agent.ask("task 2")
    views = []
    replay(load_trace(store, S), Profile(context_size=2048),
           observe=lambda call, view, state: views.append(view.messages()))  # fmt: skip
    assert views, "the replay rebuilt no call"
    assert_no_orphans(views[-1])
    assert any("Turn 2 was interrupted" in str(m["content"]) for m in views[-1])
