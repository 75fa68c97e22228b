"""The agent loop: tool calls run in the kernel, results come back, the turn ends cleanly."""

from __future__ import annotations

import json

import pytest
from agent_fakes import ScriptedModel, assert_no_orphans, recall, repl, reply

from scroll_core.agent import Session
from scroll_core.errors import ContextOverflow, ModelError, ScrollError
from scroll_core.kernel import Kernel, KernelConfig
from scroll_core.models import ToolCall
from scroll_core.profile import Profile
from scroll_core.prompts import RECALL_TOOL, REPL_TOOL
from scroll_core.store import KIND_CONTEXT_MSG, KIND_MODEL_TURN, KIND_TOOL_RESULT
from scroll_core.tokens import CharRatioCounter

S = "agent-1"


@pytest.fixture
def store_options():
    return {"token_counter": CharRatioCounter()}


@pytest.fixture
def clog(store):
    """The agent loop runs on either backend unchanged."""
    return store


@pytest.fixture(scope="module")
def kernel():
    config = KernelConfig(sandbox="process", grace_s=0.5)
    with Kernel(config) as k:
        yield k


def session(log, model, kernel, **kw):
    kw.setdefault("profile", Profile(context_size=model.context_size))
    return Session(log, model, session_id=S, kernel=kernel, **kw)


def test_a_turn_runs_a_cell_feeds_its_output_back_and_answers(clog, kernel):
    model = ScriptedModel(
        reply("Let me compute.", repl("x = 6 * 7\nprint(x)", "call_a")),
        reply("The answer is 42."),
    )
    with session(clog, model, kernel) as agent:
        result = agent.ask("What is six times seven?")
    assert result.ok and result.stop_reason == "answer"
    assert result.answer == "The answer is 42."  # the headline is stripped
    assert result.headline is not None and result.headline.startswith("⟦test task")
    # The second call saw the cell's output paired with its call.
    second = model.requests[1]
    tool = [m for m in second if m["role"] == "tool"]
    assert tool == [{"role": "tool", "content": "42", "tool_call_id": "call_a"}]
    assert_no_orphans(second)
    assert [t["function"]["name"] for t in model.tools[0]] == [REPL_TOOL, RECALL_TOOL]
    events = clog.session_events(S, limit=None)
    kinds = [(e.kind, e.role, e.name) for e in events]
    assert kinds == [
        (KIND_CONTEXT_MSG, "user", None),
        (KIND_MODEL_TURN, "assistant", None),
        (KIND_MODEL_TURN, "assistant", REPL_TOOL),
        (KIND_TOOL_RESULT, "tool", REPL_TOOL),
        (KIND_MODEL_TURN, "assistant", None),
    ]
    assert events[1].content == "Let me compute." and events[1].headline is not None
    assert events[2].tool_input == {"code": "x = 6 * 7\nprint(x)"}
    assert events[3].tool_call_id == "call_a" and events[3].metadata["status"] == "ok"
    assert all(e.dedup_key for e in events)


def test_every_step_is_recorded_for_telemetry(clog, kernel):
    model = ScriptedModel(reply("", repl("print('hi')")), reply("done"))
    with session(clog, model, kernel) as agent:
        result = agent.ask("say hi")
    first, second = result.steps
    assert [c.reason for c in first.compressions] == ["turn_start", "after_step"]
    call = first.model_call
    assert call is not None and call.input_tokens == 100 and call.output_tokens == 10
    assert call.view["prefix"] > 0 and call.view["tail"] > 0 and call.view_tokens > 0
    assert call.model == "scripted-0001" and call.tool_calls == 1
    (tool,) = first.tools
    assert tool.status == "ok" and tool.output_chars == 2 and not tool.truncated
    assert second.tools == [] and second.model_call.finish_reason == "stop"
    data = json.loads(json.dumps(result.to_dict()))
    assert data["steps"][0]["tools"][0]["name"] == REPL_TOOL
    assert data["steps"][0]["compressions"][0]["reason"] == "turn_start"


def test_headlines_are_stored_and_missing_or_malformed_ones_recorded(clog, kernel):
    model = ScriptedModel(
        reply("", repl("print(1)"), headline="⟦broken headline⟧"),
        reply("plain answer", headline=None),
    )
    with session(clog, model, kernel) as agent:
        result = agent.ask("go")
    turns = [e for e in clog.session_events(S, limit=None) if e.kind == KIND_MODEL_TURN]
    first, last = turns[0], turns[-1]
    assert first.metadata["headline_quality"] == "malformed" and first.headline is None
    assert first.metadata["headline_raw"] == "⟦broken headline⟧" and first.content == ""
    assert last.metadata["headline_quality"] == "missing" and last.content == "plain answer"
    assert [s.headline_quality for s in result.steps] == ["malformed", "missing"]


def test_an_unknown_tool_or_bad_arguments_get_an_error_result_not_a_crash(clog, kernel):
    bad = [
        ToolCall("c1", "shell", {"code": "ls"}),
        ToolCall("c2", REPL_TOOL, {}, raw_arguments="{not json", arguments_error="not JSON"),
        ToolCall("c3", REPL_TOOL, {"source": "print(1)"}),
        ToolCall("c4", RECALL_TOOL, {"code": 5}),
    ]
    model = ScriptedModel(reply("trying", *bad), reply("I will stop guessing."))
    with session(clog, model, kernel) as agent:
        result = agent.ask("do something")
    assert result.ok
    statuses = [t.status for t in result.steps[0].tools]
    assert statuses == ["refused"] * 4
    tool_messages = {
        m["tool_call_id"]: m["content"] for m in model.requests[1] if m["role"] == "tool"
    }
    assert tool_messages["c1"].startswith("error: unknown tool 'shell'")
    assert "repl_exec" in tool_messages["c1"] and "recall_history_python" in tool_messages["c1"]
    assert "not valid (not JSON)" in tool_messages["c2"]
    assert "needs a string argument 'code' (missing)" in tool_messages["c3"]
    assert "(a int)" in tool_messages["c4"]
    assert_no_orphans(model.requests[1])


def test_the_step_budget_stops_the_turn_with_a_clear_reason(clog, kernel):
    model = ScriptedModel(*[reply("again", repl(f"print({i})")) for i in range(3)])
    with session(clog, model, kernel, max_steps=3) as agent:
        result = agent.ask("loop forever")
    assert result.stop_reason == "step_budget" and not result.ok
    assert result.answer is None and "3 model calls" in (result.error or "")
    assert result.model_calls == 3 and len(result.tool_calls) == 3
    # Every call has its result, so the next turn's view is valid.
    assert_no_orphans(agent.view.messages())


def test_a_context_overflow_forces_a_compress_and_exactly_one_retry(clog, kernel):
    model = ScriptedModel(
        ContextOverflow("prompt too long", model="scripted", status=400),
        reply("fits now"),
    )
    with session(clog, model, kernel) as agent:
        result = agent.ask("hello")
    assert result.ok and result.answer == "fits now"
    (step,) = result.steps
    assert [m.error_kind for m in step.model_calls] == ["context_overflow", None]
    assert [m.attempt for m in step.model_calls] == [1, 2]
    reasons = [(c.reason, c.record.forced) for c in step.compressions]
    assert ("overflow", True) in reasons


def test_a_second_overflow_stops_the_turn(clog, kernel):
    model = ScriptedModel(
        ContextOverflow("too long", model="scripted", status=400),
        ContextOverflow("still too long", model="scripted", status=400),
        reply("never reached"),
    )
    with session(clog, model, kernel) as agent:
        result = agent.ask("hello")
    assert result.stop_reason == "context_overflow" and "still too long" in result.error
    assert len(model.requests) == 2 and len(model.script) == 1


def test_a_provider_error_stops_the_turn_and_names_the_error(clog, kernel):
    model = ScriptedModel(ModelError("bad gateway", model="scripted", status=502))
    with session(clog, model, kernel) as agent:
        result = agent.ask("hello")
        assert result.stop_reason == "model_error" and "HTTP 502" in result.error
        # The next turn works: the failed one left nothing half-written.
        model.script.append(reply("back"))
        assert agent.ask("again?").answer == "back"


def test_a_cell_that_will_not_stop_is_killed_and_the_model_told_its_variables_are_lost(
    clog, kernel
):
    stubborn = "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass"
    model = ScriptedModel(reply("", repl(stubborn, "call_slow")), reply("ok"))
    profile = Profile(context_size=4096, exec_timeout_s=0.5)
    with session(clog, model, kernel, profile=profile) as agent:
        result = agent.ask("spin")
    (tool,) = result.steps[0].tools
    assert tool.status == "timeout" and tool.variables_lost
    told = next(m for m in model.requests[1] if m["role"] == "tool")["content"]
    assert "all variables were lost" in told


def test_a_session_without_a_kernel_reports_it_to_the_model(clog):
    model = ScriptedModel(reply("", repl("print(1)")), reply("cannot run"))
    with Session(clog, model, session_id=S, profile=Profile(context_size=4096)) as agent:
        result = agent.ask("run")
    assert result.steps[0].tools[0].status == "kernel_error"
    assert "no kernel is attached" in model.requests[1][-1]["content"]


def test_a_repeated_provider_call_id_is_made_unique(clog, kernel):
    model = ScriptedModel(
        reply("", repl("print(1)", "call_0")),
        reply("one"),
        reply("", repl("print(2)", "call_0")),
        reply("two"),
    )
    with session(clog, model, kernel) as agent:
        agent.ask("first")
        agent.ask("second")
    ids = [e.tool_call_id for e in clog.session_events(S, limit=None) if e.tool_call_id]
    assert ids[0] == ids[1] == "call_0"
    assert ids[2] == ids[3] != "call_0"
    assert_no_orphans(model.requests[-1])


def test_an_empty_question_is_refused(clog, kernel):
    with session(clog, ScriptedModel(), kernel) as agent, pytest.raises(ScrollError):
        agent.ask("   ")
    assert clog.count(S) == 0


def test_recall_cells_and_their_results_are_never_searchable(clog, kernel):
    older = clog.append(
        session_id="older", kind=KIND_CONTEXT_MSG, role="user", content="the zanzibar ferry"
    )
    probe = "print('zanzibar', [h.seq for h in ms.search('zanzibar', k=10)])"
    model = ScriptedModel(
        reply("", recall(probe)),
        reply("found it"),
        reply("", recall(probe)),
        reply("same"),
        reply("", repl("print('zanzibar from repl')")),
        reply("done"),
    )
    with session(clog, model, kernel) as agent:
        first = agent.ask("when does the ferry leave?")
        second = agent.ask("and the zanzibar one?")
        agent.ask("run a plain cell")
    # Turn 1's recall cell and result both contain the word; turn 2's search sees neither,
    # nor its own question (the active turn).
    first_cell = first.steps[0].tools[0]
    (tool,) = second.steps[0].tools
    assert not tool.searchable and tool.ms_calls[0].name == "search"
    seen = tool.ms_calls[0].seqs
    assert older in seen
    assert first_cell.call_seq not in seen and first_cell.result_seq not in seen
    assert second.user_seq not in seen
    found = {h.seq: h for h in clog.search("zanzibar", k=50)}
    recall_events = [e.seq for e in clog.session_events(S, limit=None) if e.name == RECALL_TOOL]
    assert len(recall_events) == 4 and not set(recall_events) & set(found)
    repl_events = [e.seq for e in clog.session_events(S, limit=None) if e.name == REPL_TOOL]
    assert set(repl_events) <= set(found)  # ordinary cells stay searchable
    assert second.user_seq in found


def test_the_namespace_digest_of_the_last_cell_is_in_the_next_view(clog, kernel):
    model = ScriptedModel(reply("", repl("rows = list(range(40))\nprint(len(rows))")), reply("40"))
    with session(clog, model, kernel) as agent:
        result = agent.ask("count")
    archive = model.requests[1][1]["content"]
    assert "[kernel namespace]" in archive and "rows: list" in archive and "len=40" in archive
    assert "[kernel namespace]" not in model.requests[0][1]["content"]
    assert result.steps[1].model_call.view["digest"] > 0


def test_the_profile_print_cap_reaches_a_running_kernel(clog, kernel):
    model = ScriptedModel(
        reply("Printing.", repl("rows = list(range(400))\nprint(rows)", "call_p")),
        reply("Done."),
    )
    profile = Profile(context_size=model.context_size, print_cap=200)
    with session(clog, model, kernel, profile=profile) as agent:
        result = agent.ask("Print the rows.")
    (tool,) = result.steps[0].tools
    assert tool.truncated
    shown = next(m for m in model.requests[1] if m["role"] == "tool")["content"]
    assert shown.startswith(str(list(range(400)))[:200])
    assert "variables" in shown and "persist" in shown


def test_a_profile_source_applies_a_tuned_profile_at_the_next_compress(clog, kernel):
    model = ScriptedModel(reply("One."), reply("Two."))
    first = Profile(context_size=model.context_size)
    tuned = first.replace(trigger_ratio=0.5)
    current = {"profile": first}
    with session(clog, model, kernel, profile_source=lambda: current["profile"]) as agent:
        agent.ask("first question")
        assert agent.profile == first
        current["profile"] = tuned
        agent.ask("second question")
        assert agent.profile == tuned


def test_a_failing_profile_source_keeps_the_current_profile(clog, kernel):
    model = ScriptedModel(reply("One."))
    profile = Profile(context_size=model.context_size)

    def broken():
        raise RuntimeError("database is locked")

    with session(clog, model, kernel, profile=profile, profile_source=broken) as agent:
        result = agent.ask("a question")
    assert result.ok
    assert agent.profile == profile
