"""Checkpoint and resume: a resumed session appends nothing twice and runs nothing twice."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from agent_fakes import ScriptedModel, assert_no_orphans, repl, reply

from scroll_core.agent import Session
from scroll_core.errors import ScrollError
from scroll_core.kernel import Kernel, KernelConfig
from scroll_core.profile import Profile
from scroll_core.tokens import CharRatioCounter

S = "ckpt-1"


class Crash(Exception):
    """The host dying mid-turn."""


@pytest.fixture
def store_options():
    """The agent counts tokens with the char-ratio counter on either backend."""
    return {"token_counter": CharRatioCounter()}


@pytest.fixture
def clog(store):
    """Checkpoint and resume hold on SQLite and on PostgreSQL."""
    return store


@pytest.fixture(scope="module")
def kernel():
    with Kernel(KernelConfig(sandbox="process")) as k:
        yield k


def new_session(log, model, kernel, **kw):
    return Session(log, model, session_id=S, kernel=kernel, profile=Profile(context_size=1024),
                   system="A test agent.", **kw)  # fmt: skip


def saved(agent) -> dict:
    return json.loads(json.dumps(agent.checkpoint()))


def assert_nothing_twice(log):
    events = log.session_events(S, limit=None)
    keys = Counter(e.dedup_key for e in events)
    assert all(keys.values()) and max(keys.values()) == 1
    assert None not in keys


def turns(n, size=600):
    return [
        item
        for k in range(n)
        for item in (reply(f"step {k}", repl(f"print('{k}' * {size})")), reply(f"done {k}"))
    ]


def test_a_checkpoint_round_trips_through_json(clog, kernel):
    with new_session(clog, ScriptedModel(*turns(6), context_size=1024), kernel) as agent:
        for k in range(6):
            agent.ask(f"task {k}")
        data = saved(agent)
    assert len(agent.state.index) >= 1  # eviction happened, so the index is in it
    with Session.resume(data, clog, ScriptedModel(context_size=1024), kernel=kernel,
                        system="A test agent.") as back:  # fmt: skip
        assert saved(back) == data
        assert back.state.live == agent.state.live
        assert back.state.folded == agent.state.folded
        assert back.state.index.coverage() == agent.state.index.coverage()
        assert back.turn == 6 and not back.turn_open


def test_a_resumed_session_continues_without_appending_anything_twice(clog, kernel):
    with new_session(clog, ScriptedModel(*turns(3), context_size=1024), kernel) as agent:
        for k in range(3):
            agent.ask(f"task {k}")
        data = saved(agent)
    before = clog.count(S)
    model = ScriptedModel(*turns(2), context_size=1024)
    with Session.resume(data, clog, model, kernel=kernel, system="A test agent.") as back:
        back.ask("task 3")
        back.ask("task 4")
    assert clog.count(S) == before + 2 * 5
    assert_nothing_twice(clog)
    for request in model.requests:
        assert_no_orphans(request)


def test_a_turn_interrupted_after_a_step_is_finished_by_replaying_the_log(clog, kernel):
    model = ScriptedModel(*turns(1), reply("step x", repl("ran = 'once'\nprint('side effect')")))

    def crash_after_tools(record):
        if record.turn == 2 and record.tools:
            raise Crash()

    with new_session(clog, model, kernel, on_step=crash_after_tools) as agent:
        agent.ask("task 0")
        data = saved(agent)  # the runner's last checkpoint, before turn 2
        with pytest.raises(Crash):
            agent.ask("task 1")
    written = clog.count(S)
    kernel.execute("ran = 'not re-run'")

    later = ScriptedModel(reply("all done"), context_size=1024)
    with Session.resume(data, clog, later, kernel=kernel, system="A test agent.") as back:
        result = back.ask("task 1")
    assert result.ok and result.answer == "all done"
    assert len(later.requests) == 1  # step 1 came from the log, not from a second model call
    first, second = result.steps
    assert first.model_calls[0].replayed and first.tools[0].replayed
    assert not second.model_calls[0].replayed
    assert kernel.execute("print(ran)").stdout == "not re-run\n"  # the cell did not run again
    assert clog.count(S) == written + 1  # only the final answer is new
    assert_nothing_twice(clog)
    assert_no_orphans(later.requests[0])


def test_a_call_whose_cell_never_reported_is_run_on_resume(clog, kernel):
    class Dying:
        def __init__(self, real):
            self.real = real

        def register(self, functions):
            self.real.register(functions)

        def execute(self, code, timeout=None, **options):
            raise Crash()

    model = ScriptedModel(reply("running", repl("print('late result')", "call_late")))
    with new_session(clog, model, Dying(kernel)) as agent:
        data = saved(agent)
        with pytest.raises(Crash):
            agent.ask("task")
    later = ScriptedModel(reply("finished"), context_size=1024)
    with Session.resume(data, clog, later, kernel=kernel, system="A test agent.") as back:
        result = back.ask("task")
    (tool,) = result.steps[0].tools
    assert not tool.replayed and tool.status == "ok" and tool.tool_call_id == "call_late"
    tool_messages = [m for m in later.requests[0] if m["role"] == "tool"]
    assert tool_messages == [
        {"role": "tool", "content": "late result", "tool_call_id": "call_late"}
    ]
    assert_nothing_twice(clog)


def test_an_open_turn_must_be_finished_with_its_own_question(clog, kernel):
    model = ScriptedModel(reply("x", repl("print(1)")))

    def crash(record):
        raise Crash()

    with new_session(clog, model, kernel, on_step=crash) as agent:
        with pytest.raises(Crash):
            agent.ask("the first question")
        data = saved(agent)
    assert data["turn_open"] and data["turn"] == 1
    count = clog.count(S)
    with (
        Session.resume(data, clog, ScriptedModel(), kernel=kernel) as back,
        pytest.raises(ScrollError, match="the first question"),
    ):
        back.ask("something else")
    assert clog.count(S) == count


def test_a_new_session_on_an_old_session_id_never_collides_with_its_keys(clog, kernel):
    with new_session(clog, ScriptedModel(reply("one")), kernel) as first:
        first.ask("same words")
    with new_session(clog, ScriptedModel(reply("two")), kernel) as second:
        result = second.ask("same words")
    assert result.answer == "two" and clog.count(S) == 4


def test_a_broken_checkpoint_is_refused(clog, kernel):
    with new_session(clog, ScriptedModel(reply("one")), kernel) as agent:
        agent.ask("hi")
        data = saved(agent)
    for broken in ({**data, "version": 99}, {k: v for k, v in data.items() if k != "run_id"}):
        with pytest.raises(ScrollError):
            Session.resume(broken, clog, ScriptedModel(), kernel=kernel)
