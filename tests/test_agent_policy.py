"""The loop end to end: the policy baseline recalls evicted history through real ms programs."""

from __future__ import annotations

import pytest
from agent_fakes import ScriptedModel, assert_no_orphans, repl, reply

from scroll_core.agent import Session
from scroll_core.index import SEAM_BANNER
from scroll_core.kernel import Kernel, KernelConfig
from scroll_core.models import PolicyModel
from scroll_core.profile import Profile
from scroll_core.prompts import ABSTENTION, RECALL_TOOL
from scroll_core.store import KIND_CONTEXT_MSG, KIND_MODEL_TURN
from scroll_core.tokens import CharRatioCounter

S = "long-1"
FILLER = [
    "I painted a sunrise over the lake last weekend.",
    "Work has been busy, lots of meetings this week.",
    "The kids loved the museum trip.",
    "I am reading a novel about a lighthouse keeper.",
]


@pytest.fixture(scope="module")
def kernel():
    with Kernel(KernelConfig(sandbox="process")) as k:
        yield k


@pytest.fixture
def store_options():
    """The agent counts tokens with the char-ratio counter on either backend."""
    return {"token_counter": CharRatioCounter()}


@pytest.fixture
def history(store):
    """A session of 200 earlier turns, on either backend; turn 7 plants the fact."""
    log = store
    planted = None
    for turn in range(200):
        text = FILLER[turn % len(FILLER)]
        if turn == 7:
            text = "My dog Biscuit chewed my sneakers again!"
        seq = log.append(
            session_id=S,
            kind=KIND_CONTEXT_MSG,
            role="user",
            name="Melanie",
            content=text,
            created_at=f"2023-05-{1 + turn // 8:02d}T{10 + turn % 10:02d}:{turn % 60:02d}:00Z",
        )
        if turn == 7:
            planted = seq
        log.append(
            session_id=S,
            kind=KIND_MODEL_TURN,
            role="assistant",
            content=f"Noted, thanks for telling me ({turn}).",
            headline=f"⟦chat {turn} | status: listened; next: wait | anchors: turn {turn}⟧",
            created_at=f"2023-05-{1 + turn // 8:02d}T{10 + turn % 10:02d}:{turn % 60:02d}:30Z",
        )
    log.planted = planted
    yield log


def test_the_policy_answers_a_planted_fact_from_evicted_history(history, kernel):
    profile = Profile(context_size=4096)
    with Session(history, PolicyModel(context_size=4096), session_id=S, profile=profile,
                 kernel=kernel) as agent:  # fmt: skip
        result = agent.ask("What is the name of Melanie's dog?")
    assert result.ok, result.error
    assert result.answer == "Biscuit"
    assert f"answered from seq {history.planted} " in (result.headline or "")
    assert ABSTENTION not in result.answer
    # The fact was evicted before the model ever saw it: only ms brought it back.
    first = result.steps[0].compressions[0].record
    assert first.action == "evict" and first.evicted[0] <= history.planted <= first.evicted[1]
    assert history.planted not in agent.state.live
    assert len(agent.state.index) >= 1
    agent.state.index.check()
    (cell,) = result.steps[0].tools
    assert cell.name == RECALL_TOOL and cell.status == "ok" and not cell.searchable
    assert history.planted in cell.seqs_touched
    names = [c.name for c in cell.ms_calls]
    assert "search" in names and "expand" in names
    assert result.headline and "answered from seq" in result.headline
    # The model's view stayed within the window at every call.
    for step in result.steps:
        assert step.model_call.view["total"] <= profile.hard_limit


def test_eviction_during_a_long_session_tiles_the_index_with_no_gap(store, kernel):
    def turn_of(k):
        big = f"print('row {k}: ' + 'x' * 900)"
        return [reply(f"Working on {k}.", repl(big)), reply(f"Done with {k}.")]

    script = [item for k in range(60) for item in turn_of(k)]
    model = ScriptedModel(*script, context_size=1024)
    profile = Profile(context_size=1024)
    log = store
    with Session(
        log, model, session_id=S, profile=profile, kernel=kernel, system="A test agent."
    ) as agent:
        evictions = 0
        for k in range(60):
            result = agent.ask(f"Task {k}: print a long row")
            assert result.ok, result.error
            evictions += sum(
                c.record.evicted is not None for s in result.steps for c in s.compressions
            )
            index = agent.state.index
            index.check()
            # Evicted range and live seqs together are the whole session, with no gap.
            seqs = [e.seq for e in log.session_events(S, limit=None)]
            evicted = list(range(index.first_seq, index.last_seq + 1)) if len(index) else []
            assert evicted + agent.state.live == seqs
        assert evictions >= 10 and len(agent.state.index) < evictions
        assert agent.state.index.tier_profile()[1:]  # the carry reached tier 1
        for request in model.requests:
            assert_no_orphans(request)


def test_the_policy_reads_the_request_even_when_the_archive_is_joined_to_it(history, kernel):
    # A tail this small keeps only the active turn, so the view joins the index and the seam
    # banner to the request itself (roles still alternate); the request is what follows.
    profile = Profile(context_size=4096, reserve_ratio=0.01, tail_floor_tokens=10)
    seen = []

    class Watching(PolicyModel):
        def complete(self, messages, tools):
            seen.append(messages)
            return super().complete(messages, tools)

    with Session(history, Watching(context_size=4096), session_id=S, profile=profile,
                 kernel=kernel) as agent:  # fmt: skip
        result = agent.ask("What is the name of Melanie's dog?")
    first = seen[0]
    assert len(first) == 2 and first[1]["role"] == "user"
    assert SEAM_BANNER in first[1]["content"]
    assert first[1]["content"].endswith("What is the name of Melanie's dog?")
    assert result.ok and "Biscuit" in result.answer
