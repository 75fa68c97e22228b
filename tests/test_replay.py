"""Counterfactual replay of a session recorded by the real agent loop with the policy model."""

from __future__ import annotations

import itertools

import pytest

from scroll_core.agent import Session
from scroll_core.kernel import Kernel, KernelConfig
from scroll_core.kernel.ms import MsCapability
from scroll_core.models import PolicyModel
from scroll_core.profile import Profile
from scroll_core.replay import (
    TraceError,
    counterfactual,
    facts_status,
    load_trace,
    replay,
    reproduction,
)
from scroll_core.store import KIND_CONTEXT_MSG, KIND_MODEL_TURN
from scroll_core.tokens import CharRatioCounter
from tests.conftest import BACKENDS, open_store

S = "replay-1"
FILLER = [
    "I painted a sunrise over the lake last weekend.",
    "Work has been busy, lots of meetings this week.",
    "The kids loved the museum trip.",
    "I am reading a novel about a lighthouse keeper.",
]
PLANTED = "My dog Biscuit chewed my sneakers again!"
QUESTIONS = [
    "What is the name of Melanie's dog?",
    "What novel is Melanie reading?",
    "Where did the kids go on their trip?",
    "What did Melanie paint last weekend?",
    "How has work been for Melanie?",
    "What did Biscuit chew?",
]
# One protected result, so completed recall printouts are folded as well as evicted.
PROFILE = Profile(context_size=4096, protected_recent_tool_results=1)


@pytest.fixture(scope="module", params=BACKENDS)
def recorded(request, tmp_path_factory):
    """A session of 120 earlier turns (turn 7 plants the fact), then six questions asked by
    the agent loop with the policy model through real ms programs in a kernel; on SQLite
    and on PostgreSQL, replay reads only through the Event Log interface."""
    with open_store(
        request, request.param, tmp_path_factory.mktemp("replay"), token_counter=CharRatioCounter()
    ) as log:
        yield _record(log)


def _record(log):
    planted = 0
    for turn in range(120):
        text = PLANTED if turn == 7 else FILLER[turn % len(FILLER)]
        at = f"2023-05-{1 + turn // 8:02d}T10:{turn % 60:02d}"
        seq = log.append(
            session_id=S,
            kind=KIND_CONTEXT_MSG,
            role="user",
            name="Melanie",
            content=text,
            created_at=f"{at}:00Z",
        )
        planted = seq if turn == 7 else planted
        log.append(
            session_id=S,
            kind=KIND_MODEL_TURN,
            role="assistant",
            content=f"Noted, thanks ({turn}).",
            created_at=f"{at}:30Z",
            headline=f"⟦chat {turn} | status: listened; next: wait | anchors: t{turn}⟧",
        )
    steps = []
    answers = []
    with (
        Kernel(KernelConfig(sandbox="process")) as kernel,
        Session(
            log, PolicyModel(context_size=4096), session_id=S, profile=PROFILE, kernel=kernel
        ) as agent,
    ):
        for question in QUESTIONS:
            result = agent.ask(question)
            assert result.ok, result.error
            answers.append(f"{result.answer}\n{result.headline}")
            steps.extend(step.to_dict() for step in result.steps)
    return log, steps, planted, answers


def _compress_log(steps):
    return [
        (
            c["reason"],
            c["action"],
            c["evicted"],
            tuple(c["pre_folded"] + c["live_folded"] + c["active_folded"]),
            c["tokens_before"],
            c["tokens_after"],
        )
        for s in steps
        for c in s["compressions"]
    ]


def test_own_profile_replay_reproduces_the_recorded_folds_and_evictions(recorded):
    log, steps, _, _ = recorded
    recorded_log = _compress_log(steps)
    # The recorded run did evict and fold, so reproducing it is not trivial.
    assert sum(1 for r in recorded_log if r[2] is not None) >= 2
    assert sum(len(r[3]) for r in recorded_log) >= 1

    trace = load_trace(log, S, steps=steps)
    result = replay(trace, PROFILE)
    replayed = [
        (
            c.reason,
            c.action,
            list(c.evicted) if c.evicted else None,
            c.folded,
            c.tokens_before,
            c.tokens_after,
        )
        for c in result.compresses
    ]
    assert replayed == recorded_log
    check = reproduction(trace, result)
    assert check["exact"] and check["checked"] == len(recorded_log)
    # Every call's view is the one the model was given, token for token.
    recorded_views = [s["model_calls"][-1]["view"]["total"] for s in steps if s["model_calls"]]
    assert [c.total for c in result.calls] == recorded_views
    assert [c.recorded_tokens for c in result.calls] == recorded_views


def test_reproduction_catches_a_different_profile(recorded):
    log, steps, _, _ = recorded
    trace = load_trace(log, S, steps=steps)
    other = replay(trace, PROFILE.replace(trigger_ratio=0.6))
    check = reproduction(trace, other)
    assert not check["exact"] and check["mismatches"]


def test_replay_is_deterministic(recorded):
    log, steps, _, _ = recorded
    first = counterfactual(
        load_trace(log, S, steps=steps),
        PROFILE.replace(trigger_ratio=0.6),
        recorded_profile=PROFILE,
    )
    for policy in ("scroll", "flat", "none", "summarise"):
        a = replay(load_trace(log, S, steps=steps), PROFILE, policy).to_dict()
        b = replay(load_trace(log, S, steps=steps), PROFILE, policy).to_dict()
        assert a == b
    again = counterfactual(
        load_trace(log, S, steps=steps),
        PROFILE.replace(trigger_ratio=0.6),
        recorded_profile=PROFILE,
    )
    assert first == again


def test_a_lower_trigger_costs_evictions_and_regret(recorded):
    log, steps, _, _ = recorded
    trace = load_trace(log, S, steps=steps)
    report = counterfactual(trace, PROFILE.replace(trigger_ratio=0.6), recorded_profile=PROFILE)
    rec, rep = report["recorded"], report["replay"]
    assert rep["evictions"] > rec["evictions"]
    assert rep["peak_view"] < rec["peak_view"]
    assert rep["peak_view"] <= PROFILE.replace(trigger_ratio=0.6).trigger_tokens
    assert report["delta"]["billed_prompt_tokens"] == (
        rep["billed_prompt_tokens"] - rec["billed_prompt_tokens"]
    )
    # What the recorded run had in view and the tighter profile evicted would need retrieval.
    assert report["regret"]["evicted_spans_read_live"] >= 1
    for call in rep["per_call"]:
        assert 0 <= call["prefill"] <= call["total"]
    assert rep["prefill_tokens"] < rep["billed_prompt_tokens"]


def test_no_management_overflows_and_makes_every_retrieval_needless(recorded):
    log, steps, _, _ = recorded
    trace = load_trace(log, S, steps=steps)
    report = counterfactual(trace, PROFILE, "none", recorded_profile=PROFILE)
    rep = report["replay"]
    first_over = next(c for c in rep["per_call"] if c["total"] > PROFILE.context_size)
    assert rep["overflow"]["call"] == first_over["call"]
    assert rep["evictions"] == 0 and rep["peak_view"] > PROFILE.context_size
    # Everything stays in view, so every recorded expand was avoidable.
    regret = report["regret"]
    assert regret["retrievals_recorded"] > 0
    assert regret["needless_retrievals"] == regret["retrievals_recorded"]
    # Append-only views share their whole previous prompt, up to the namespace digest (it
    # sits before the live turns): where the digest kept its size, prefill is what is new.
    calls = rep["per_call"]
    assert calls[0]["prefill"] == calls[0]["total"]
    same = [
        (b, a)
        for a, b in itertools.pairwise(calls)
        if a["sections"]["digest"] == b["sections"]["digest"]
    ]
    assert same
    assert all(b["prefill"] == b["total"] - a["total"] for b, a in same)
    changed = [
        (b, a)
        for a, b in itertools.pairwise(calls)
        if a["sections"]["digest"] != b["sections"]["digest"]
    ]
    assert all(b["prefill"] > b["total"] - a["total"] for b, a in changed)


def test_flat_index_never_carries(recorded):
    log, steps, _, _ = recorded
    trace = load_trace(log, S, steps=steps)
    flat = replay(trace, PROFILE.replace(tier_cap=2), "flat")
    tiered = replay(trace, PROFILE.replace(tier_cap=2), "scroll")
    assert flat.evictions == tiered.evictions >= 3
    assert flat.calls[-1].tier_profile == (flat.evictions,)
    assert len(tiered.calls[-1].tier_profile) > 1


def test_planted_fact_lost_by_summarise_on_every_retry_recoverable_by_address(recorded):
    log, steps, planted, answers = recorded
    assert log.get(planted).content == PLANTED
    trace = load_trace(log, S, steps=steps)
    # The recorded run (Scroll) asked for it later and read it back by address.
    assert any(planted in r.seqs for r in trace.retrievals)
    assert "Biscuit" in answers[0] and f"seq {planted}" in answers[0]
    facts = {"dog": planted}
    for _ in range(5):
        lossy = counterfactual(trace, PROFILE, "summarise", recorded_profile=PROFILE)
        status = facts_status(replay(trace, PROFILE, "summarise"), facts)["dog"]
        assert status["status"] == "discarded" and not status["reachable"]
        assert status["lost_at_call"] == 0  # evicted before the first call, and gone
        assert lossy["regret"]["retrievals_unreachable"] >= 1
        assert any(planted in u["seqs"] for u in lossy["regret"]["unreachable"])
    kept = facts_status(replay(trace, PROFILE, "scroll"), facts)["dog"]
    assert kept["status"] == "evicted" and kept["reachable"]
    assert kept["recover_with"].startswith(f"ms.expand({planted})")
    ms = MsCapability(log, session_id=S)
    try:
        event, seqs = ms.expand(planted)
    finally:
        ms.close()
    assert seqs == [planted] and event["fields"]["content"] == PLANTED


def test_the_log_alone_replays_the_recorded_run_exactly(recorded):
    log, steps, planted, _ = recorded
    trace = load_trace(log, S)  # no step records, no compress rows
    assert trace.source == "log" and trace.exact and not trace.notes
    result = replay(trace, PROFILE)
    # Every compress does what the recorded one did, token for token ...
    replayed = [
        (
            c.reason,
            c.action,
            list(c.evicted) if c.evicted else None,
            c.folded,
            c.tokens_before,
            c.tokens_after,
        )
        for c in result.compresses
    ]
    assert replayed == _compress_log(steps)
    # ... the digest the kernel left was in the view (so an empty one would not fit) ...
    digests = [c["view"]["digest"] for s in steps for c in s["model_calls"]]
    assert max(digests) > 0
    # ... and every call's view is the one the model was given.
    recorded_views = [s["model_calls"][-1]["view"]["total"] for s in steps if s["model_calls"]]
    assert [c.total for c in result.calls] == recorded_views
    check = reproduction(trace, result)
    assert check["exact"] and check["calls_checked"] == len(recorded_views)
    # Retrievals are the cells' own expand and recall_tool calls, as the step records list.
    assert trace.retrievals == load_trace(log, S, steps=steps).retrievals
    assert {r.name for r in trace.retrievals} <= {"expand", "recall_tool"}
    assert any(planted in r.seqs for r in trace.retrievals)
    # A tighter profile replayed from the log alone is caught as not the recorded run.
    assert not reproduction(trace, replay(trace, PROFILE.replace(trigger_ratio=0.6)))["exact"]


def _copy_as_older(log, older):
    """Copy ``log`` into ``older`` as the loop wrote it before it kept what replay needs."""
    newer = ("digest_tokens", "ms_calls", "ms_calls_total", "forced_compresses", "view_tokens")
    older.append_many(
        {
            "session_id": e.session_id,
            "agent_id": e.agent_id,
            "kind": e.kind,
            "role": e.role,
            "name": e.name,
            "content": e.payload.load() if e.payload is not None else e.content,
            "tool_call_id": e.tool_call_id,
            "tool_input": e.tool_input,
            "headline": e.headline,
            "metadata": {k: v for k, v in e.metadata.items() if k not in newer},
            "created_at": e.created_at,
            "dedup_key": e.dedup_key,
        }
        for e in log.session_events(S, limit=None)
    )


def test_an_older_log_replays_as_before_marked_inexact(recorded, request, tmp_path):
    log, steps, _, _ = recorded
    with open_store(request, log.backend, tmp_path, token_counter=CharRatioCounter()) as older:
        _copy_as_older(log, older)
        assert [e.seq for e in older.session_events(S, limit=None)] == [
            e.seq for e in log.session_events(S, limit=None)
        ]
        trace = load_trace(older, S)
        assert not trace.exact and trace.notes
        assert all(p.digest_tokens == 0 for p in trace.compresses)
        assert all(c.input_tokens is None for c in trace.calls)
        assert trace.retrievals and {r.name for r in trace.retrievals} == {"touched"}
        result = replay(trace, PROFILE)
        assert len(result.calls) == sum(1 for s in steps if s["model_calls"])
        check = reproduction(trace, result)
        assert check["checked"] == 0 and check["calls_checked"] == 0 and not check["exact"]
        # The step records still make it exact.
        with_steps = load_trace(older, S, steps=steps)
        assert reproduction(with_steps, replay(with_steps, PROFILE))["exact"]


def test_step_records_that_do_not_fit_the_log_are_refused(recorded):
    log, steps, _, _ = recorded
    with pytest.raises(TraceError, match=r"do not hold|left over|do not fit"):
        load_trace(log, S, steps=steps[:-3])
    with pytest.raises(TraceError, match="no events"):
        load_trace(log, "no-such-session")
