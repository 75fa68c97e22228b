"""The context window inspector: a recorded call's window rebuilt from the log is the one the
model was sent, message for message and token for token, under the profile in force."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from scroll_core.agent import Session
from scroll_core.kernel import Kernel, KernelConfig
from scroll_core.models import PolicyModel
from scroll_core.profile import Profile
from scroll_core.replay import (
    TraceError,
    counterfactual,
    inspect_call,
    load_trace,
    replay,
    reproduction,
)
from scroll_core.store import KIND_CONTEXT_MSG, KIND_MODEL_TURN
from scroll_core.tokens import CharRatioCounter
from tests.conftest import BACKENDS, open_store

S = "window-1"
BEFORE = Profile(context_size=4096, protected_recent_tool_results=1)
# Tuned mid-run: a lower trigger evicts sooner, so one profile can't reproduce the whole run.
AFTER = BEFORE.replace(trigger_ratio=0.6)
QUESTIONS = [
    "What is the name of Melanie's dog?",
    "What novel is Melanie reading?",
    "Where did the kids go on their trip?",
    "What did Melanie paint last weekend?",
    "What did Biscuit chew?",
]
SWITCH_AFTER = 2  # questions asked under BEFORE


class RecordingModel:
    """The policy model, keeping a copy of every message list it is sent."""

    def __init__(self, inner: PolicyModel) -> None:
        self.inner = inner
        self.name = inner.name
        self.context_size = inner.context_size
        self.sent: list[list[dict[str, Any]]] = []

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Any:
        self.sent.append(copy.deepcopy(messages))
        return self.inner.complete(messages, tools)


@pytest.fixture(scope="module", params=BACKENDS)
def recorded(request, tmp_path_factory):
    """The recorded session, on SQLite and on PostgreSQL."""
    with open_store(
        request, request.param, tmp_path_factory.mktemp("window"), token_counter=CharRatioCounter()
    ) as log:
        yield _record(log)


def _record(log):
    for turn in range(120):
        text = "My dog Biscuit chewed my sneakers!" if turn == 7 else f"Day {turn}: a walk."
        log.append(session_id=S, kind=KIND_CONTEXT_MSG, role="user", name="Melanie", content=text)
        log.append(
            session_id=S,
            kind=KIND_MODEL_TURN,
            role="assistant",
            content=f"Noted ({turn}).",
            headline=f"⟦chat {turn} | status: listened; next: wait | anchors: t{turn}⟧",
        )
    model = RecordingModel(PolicyModel(context_size=4096))
    in_force = {"profile": BEFORE}
    switched_at_turn = None
    with (
        Kernel(KernelConfig(sandbox="process")) as kernel,
        Session(
            log,
            model,
            session_id=S,
            profile=BEFORE,
            kernel=kernel,
            profile_source=lambda: in_force["profile"],
        ) as agent,
    ):
        for i, question in enumerate(QUESTIONS):
            if i == SWITCH_AFTER:
                in_force["profile"] = AFTER
            result = agent.ask(question)
            assert result.ok, result.error
            if i == SWITCH_AFTER:
                switched_at_turn = result.steps[0].turn
    trace = load_trace(log, S)
    profiles = [BEFORE if p.turn < switched_at_turn else AFTER for p in trace.compresses]
    return log, trace, profiles, model.sent


def test_every_call_rebuilds_to_the_messages_and_tokens_it_was_sent(recorded):
    _, trace, profiles, sent = recorded
    assert trace.exact and len(trace.calls) == len(sent) > 0
    for i, messages in enumerate(sent):
        window = inspect_call(trace, AFTER, i, profiles=profiles)
        assert window.messages == messages, f"call {i}"
        assert window.total == window.recorded_tokens, f"call {i}"
        assert sum(window.sections.values()) == window.total
        assert sum(p.tokens or 0 for p in window.parts) == window.total
        assert window.digest_known
    digests = [
        p
        for i in range(len(sent))
        for p in inspect_call(trace, AFTER, i, profiles=profiles).parts
        if p.section == "digest"
    ]
    assert digests and all(p.text.startswith("[kernel namespace]") for p in digests)


def test_a_later_call_shows_its_sections_and_index_blocks(recorded):
    _, trace, profiles, _ = recorded
    window = inspect_call(trace, AFTER, len(trace.calls) - 1, profiles=profiles)
    sections = {p.section for p in window.parts}
    assert {"prefix", "index", "tail"} <= sections
    assert window.blocks and all(b.lo_seq <= b.hi_seq for b in window.blocks)
    index = next(p for p in window.parts if p.section == "index")
    assert str(window.blocks[0].lo_seq) in index.text
    assert window.profile == AFTER


def test_the_diff_names_what_was_evicted_and_what_arrived(recorded):
    _, trace, profiles, _ = recorded
    diffs = [inspect_call(trace, AFTER, i, profiles=profiles).diff for i in range(len(trace.calls))]
    assert diffs[0].first and diffs[0].arrived
    assert any(d.evicted for d in diffs[1:]), "the run evicted between calls"
    question_seqs = {e.seq for e in trace.events if e.content in QUESTIONS}
    arrived = {s for d in diffs[1:] for s in d.arrived}
    assert question_seqs - {min(question_seqs)} <= arrived
    for d in diffs[1:]:
        assert not set(d.evicted) & set(d.arrived)


def test_a_run_tuned_midway_reproduces_only_with_the_profiles_in_force(recorded):
    _, trace, profiles, _ = recorded
    with_audit = reproduction(trace, replay(trace, AFTER, profiles=profiles))
    assert with_audit["exact"], with_audit["mismatches"]
    as_now = reproduction(trace, replay(trace, AFTER))
    assert not as_now["exact"]
    report = counterfactual(
        trace, AFTER, recorded_profile=AFTER, recorded_profiles=profiles, per_call=False
    )
    assert report["reproduction"]["exact"]


def test_it_refuses_a_call_that_does_not_exist_and_a_misfit_profile_list(recorded):
    _, trace, profiles, _ = recorded
    with pytest.raises(TraceError, match="no call 999"):
        inspect_call(trace, AFTER, 999, profiles=profiles)
    with pytest.raises(TraceError, match="no call -1"):
        inspect_call(trace, AFTER, -1, profiles=profiles)
    with pytest.raises(Exception, match="profiles given"):
        replay(trace, AFTER, profiles=profiles[:-1])
