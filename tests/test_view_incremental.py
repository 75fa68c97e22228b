"""A view extended from the previous one is the view a full rebuild gives.

``build_view(previous=...)`` reuses the previous view's entries when the state only grew
since; compress passes the last view so its trigger check costs O(new events). These tests
drive random histories (turns, large results that become previews, rewrites that drop live
events, compressions that fold and evict) and compare the extended view with a rebuilt one
after every step."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scroll_core.eviction import compress
from scroll_core.profile import Profile
from scroll_core.tokens import CharRatioCounter
from scroll_core.view import ContextState, Prefix, WorkingView, build_view

COUNTER = CharRatioCounter()
PREFIX = Prefix.build("You are a test agent.", [], counter=COUNTER)
_sessions = itertools.count()


@pytest.fixture
def store_options():
    return {"token_counter": COUNTER, "payload_threshold": 2_000}


# One step of a history: ("turn", result chars), ("user", words), ("drop", how many of the
# oldest live events), ("compress", trigger tokens).
STEP = st.one_of(
    st.tuples(st.just("turn"), st.integers(min_value=10, max_value=9_000)),
    st.tuples(st.just("user"), st.integers(min_value=1, max_value=400)),
    st.tuples(st.just("drop"), st.integers(min_value=1, max_value=3)),
    st.tuples(st.just("compress"), st.integers(min_value=300, max_value=6_000)),
)


def _append_turn(log, sid: str, k: int, chars: int) -> None:
    cid = f"call_{sid}_{k}"
    log.append_many(
        [
            {"session_id": sid, "kind": "context_msg", "role": "user", "content": f"q{k}"},
            {
                "session_id": sid,
                "kind": "model_turn",
                "role": "assistant",
                "name": "repl_exec",
                "tool_call_id": cid,
                "tool_input": {"code": f"x = {k}"},
                "content": json.dumps({"code": f"x = {k}"}),
            },
            {
                "session_id": sid,
                "kind": "tool_result",
                "role": "tool",
                "name": "repl_exec",
                "tool_call_id": cid,
                "content": f"r{k} " + "y" * chars,  # past the payload threshold: a preview
            },
            {"session_id": sid, "kind": "model_turn", "role": "assistant", "content": f"a{k}"},
        ]
    )


def _same(extended: WorkingView, rebuilt: WorkingView) -> None:
    assert extended == rebuilt  # prefix, archive, every entry and the report
    assert extended.messages() == rebuilt.messages()


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=st.lists(STEP, min_size=1, max_size=14))
def test_an_extended_view_equals_a_rebuilt_one_on_random_histories(store, steps):
    sid = f"inc-{next(_sessions)}"
    state = ContextState.new(sid)
    profile = Profile(context_size=8_192)
    view: WorkingView | None = None
    for k, (op, arg) in enumerate(steps):
        if op == "turn":
            _append_turn(store, sid, k, arg)
        elif op == "user":
            store.append(session_id=sid, kind="context_msg", role="user", content="w " * arg)
        elif op == "drop":
            state.drop(state.live[:arg])
        state.sync(store)
        if op == "compress":
            trigger = Profile(context_size=max(arg * 5 // 4 + 1, 256))
            try:
                view = compress(
                    state, trigger, log=store, prefix=PREFIX, counter=COUNTER, previous=view
                ).view
            except Exception:  # a window too small for the active turn: nothing to compare
                view = None
                continue
            profile = trigger
        extended = build_view(
            state, profile, log=store, prefix=PREFIX, counter=COUNTER, previous=view
        )
        rebuilt = build_view(state, profile, log=store, prefix=PREFIX, counter=COUNTER)
        _same(extended, rebuilt)
        if view is not None:
            # The messages of the view before, reused: the same messages as converted anew.
            earlier = view.messages()
            assert extended.messages(reuse=(view, earlier)) == rebuilt.messages()
            assert earlier == view.messages()  # and the earlier ones left as they were
        if op in ("turn", "user") and view is not None and view.entries:
            assert extended.entries[0] is view.entries[0]  # reused, not rebuilt
        view = extended


def test_a_view_built_with_another_counter_is_not_reused(store):
    sid = f"inc-{next(_sessions)}"
    _append_turn(store, sid, 0, 50)
    state = ContextState.new(sid)
    state.sync(store)
    profile = Profile(context_size=8_192)
    first = build_view(state, profile, log=store, prefix=PREFIX, counter=CharRatioCounter(2.0))
    _append_turn(store, sid, 1, 50)
    state.sync(store)
    extended = build_view(state, profile, log=store, prefix=PREFIX, counter=COUNTER, previous=first)
    rebuilt = build_view(state, profile, log=store, prefix=PREFIX, counter=COUNTER)
    _same(extended, rebuilt)


def test_a_fold_since_the_previous_view_rebuilds_the_folded_entry(store):
    sid = f"inc-{next(_sessions)}"
    _append_turn(store, sid, 0, 3_000)
    _append_turn(store, sid, 1, 40)
    state = ContextState.new(sid)
    state.sync(store)
    profile = Profile(context_size=8_192)
    first = build_view(state, profile, log=store, prefix=PREFIX, counter=COUNTER)
    result_seq = next(e.event.seq for e in first.entries if e.event.kind == "tool_result")
    state.folded.add(result_seq)
    extended = build_view(state, profile, log=store, prefix=PREFIX, counter=COUNTER, previous=first)
    assert next(e for e in extended.entries if e.event.seq == result_seq).folded
    assert extended.tokens < first.tokens
    _same(extended, build_view(state, profile, log=store, prefix=PREFIX, counter=COUNTER))
