"""Algorithm 1: fold, evict, fold again, or refuse; and the working view it leaves."""

from __future__ import annotations

import itertools
import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scroll_core.errors import ContextWindowUnfit, ScrollError
from scroll_core.eviction import compress, fold_low_water
from scroll_core.headlines import NO_MILESTONE
from scroll_core.index import SEAM_BANNER
from scroll_core.profile import Profile
from scroll_core.store import EventLog
from scroll_core.tokens import CharRatioCounter
from scroll_core.view import FOLD_MARK, ContextState, Prefix, build_view

S = "sess-1"
COUNTER = CharRatioCounter()
PREFIX = Prefix.build("You are a test agent. Use the tools.", [], counter=COUNTER)
# Numbers the sessions of a property test's examples, which share one log.
_EXAMPLES = itertools.count()


@pytest.fixture
def store_options():
    return {"token_counter": COUNTER}


@pytest.fixture
def clog(store):
    """Eviction reads and writes only through the Event Log: it runs on both backends."""
    return store


class Session:
    """Writes a conversation the way the agent loop does."""

    def __init__(self, log: EventLog, session_id: str = S) -> None:
        self.log = log
        self.sid = session_id
        self.calls = 0

    def user(self, text: str) -> int:
        return self.log.append(session_id=self.sid, kind="context_msg", role="user", content=text)

    def reply(self, text: str, headline: str | None = None) -> int:
        return self.log.append(
            session_id=self.sid,
            kind="model_turn",
            role="assistant",
            content=text,
            headline=headline,
        )

    def call(self, code: str = "print(1)") -> str:
        self.calls += 1
        cid = f"call_{self.calls}"
        self.log.append(
            session_id=self.sid,
            kind="model_turn",
            role="assistant",
            name="repl_exec",
            tool_call_id=cid,
            tool_input={"code": code},
            content=f"repl_exec {json.dumps({'code': code})}",
        )
        return cid

    def result(self, cid: str, text: str) -> int:
        return self.log.append(
            session_id=self.sid,
            kind="tool_result",
            role="tool",
            name="repl_exec",
            tool_call_id=cid,
            content=text,
        )

    def turn(self, k: int, result_chars: int = 2_000, headline: bool = True) -> list[str]:
        self.user(f"question {k}")
        cid = self.call(f"x = {k}")
        self.result(cid, f"r{k} " + "y" * (result_chars - len(f"r{k} ")))
        self.reply(
            f"answer {k}",
            f"⟦task {k} | status: done; next: none | anchors: q{k}⟧" if headline else None,
        )
        return [cid]


def profile_with_trigger(trigger: int, **extra) -> Profile:
    """A profile whose trigger_tokens is exactly ``trigger``."""
    c = math.ceil(trigger / 0.8)
    while int(0.8 * c) < trigger:
        c += 1
    p = Profile(context_size=c, **extra)
    assert p.trigger_tokens == trigger
    return p


def state_for(log: EventLog, session_id: str = S) -> ContextState:
    state = ContextState.new(session_id)
    state.sync(log)
    return state


def view_tokens(state, log, profile=None) -> int:
    return build_view(state, profile or Profile(), log=log, prefix=PREFIX).tokens


def assert_no_orphans(messages):
    announced: set[str] = set()
    answered: set[str] = set()
    for m in messages:
        if m["role"] == "assistant":
            announced |= {c["id"] for c in m.get("tool_calls", [])}
        if m["role"] == "tool":
            assert m["tool_call_id"] in announced, f"orphan tool result {m['tool_call_id']}"
            answered.add(m["tool_call_id"])
    assert announced == answered, f"calls without results: {announced - answered}"


def test_exactly_at_the_trigger_nothing_happens(clog):
    chat = Session(clog)
    for k in range(8):
        chat.turn(k)
    state = state_for(clog)
    total = view_tokens(state, clog)
    before = state.to_checkpoint()
    record = compress(state, profile_with_trigger(total), log=clog, prefix=PREFIX)
    assert record.action == "none" and not record.compacted
    assert record.tokens_before == record.tokens_after == total
    assert state.to_checkpoint() == before

    record = compress(state, profile_with_trigger(total - 1), log=clog, prefix=PREFIX)
    assert record.action != "none"
    assert record.tokens_after <= total - 1


def test_pre_fold_alone_can_avoid_eviction(clog):
    chat = Session(clog)
    for k in range(8):
        chat.turn(k)
    chat.user("the live question")
    state = state_for(clog)
    total = view_tokens(state, clog)
    # A protected tail close to the trigger puts the low-water mark within the fold's reach.
    profile = profile_with_trigger(total - 100, reserve_ratio=0.7)
    record = compress(state, profile, log=clog, prefix=PREFIX)
    assert record.action == "prefold"
    assert record.tokens_after <= fold_low_water(profile) < profile.trigger_tokens
    assert record.evicted is None and len(state.index) == 0
    # One batch: every completed result but the five newest (8 - 5 = 3), oldest first at
    # equal size.
    assert [clog.get(s).tool_call_id for s in record.pre_folded] == ["call_1", "call_2", "call_3"]
    assert record.tokens_after <= total - 100
    assert record.pre_folded_saved == total - record.tokens_after


def test_a_fold_that_only_gets_just_under_the_trigger_evicts_in_the_same_rewrite(clog):
    chat = Session(clog)
    for k in range(8):
        chat.turn(k)
    chat.user("the live question")
    state = state_for(clog)
    total = view_tokens(state, clog)
    profile = profile_with_trigger(total - 100)
    record = compress(state, profile, log=clog, prefix=PREFIX)
    # Folding alone would get under the trigger, not to the low-water mark: a few calls
    # later the view would cross again and every fold rewrites the provider's cached prefix.
    assert record.pre_folded and record.action == "evict"
    assert record.tokens_after <= profile.trigger_tokens
    assert_no_orphans(record.view.messages())


def test_a_growing_session_folds_alone_at_most_once_between_evictions(clog):
    chat = Session(clog)
    state = ContextState.new(S)
    profile = Profile(context_size=8_000)
    view = None
    folds_alone = evictions = most = 0
    for k in range(120):
        chat.turn(k, result_chars=400 + 300 * (k % 7))
        chat.user(f"next {k}")
        record = compress(state, profile, log=clog, prefix=PREFIX, previous=view)
        view = record.view
        assert record.tokens_after <= profile.hard_limit
        if record.action == "prefold":
            folds_alone += 1
            most = max(most, folds_alone)
        elif record.evicted:
            evictions += 1
            folds_alone = 0
    assert evictions >= 3
    assert most <= 1
    state.index.check()  # every evicted seq is still covered by the index


def test_pre_fold_takes_the_largest_saving_first(clog):
    chat = Session(clog)
    sizes = [1_000, 5_000, 2_000, 300, 300, 300, 300, 300]
    for k, size in enumerate(sizes):
        chat.turn(k, result_chars=size)
    chat.user("live")
    state = state_for(clog)
    total = view_tokens(state, clog)
    record = compress(state, profile_with_trigger(total - 600), log=clog, prefix=PREFIX)
    # The five newest (300 chars) are protected; the rest go in order of saving.
    assert [clog.get(s).tool_call_id for s in record.pre_folded] == ["call_2", "call_3", "call_1"]


def test_results_of_exactly_pre_trim_min_chars_are_not_pre_folded(clog):
    chat = Session(clog)
    sizes = [1_000] * 4 + [1_001] * 3 + [300] * 5  # the five newest are protected anyway
    for k, size in enumerate(sizes):
        chat.turn(k, result_chars=size)
    chat.user("live")
    state = state_for(clog)
    total = view_tokens(state, clog)
    profile = profile_with_trigger(total - 1, pre_trim_min_chars=1_000)
    record = compress(state, profile, log=clog, prefix=PREFIX, force=True)
    assert sorted(len(clog.get(s).content) for s in record.pre_folded) == [1_001] * 3


def test_the_five_newest_and_the_active_turns_results_are_protected(clog):
    chat = Session(clog)
    for k in range(10):
        chat.turn(k)
    chat.user("live question")
    active = [chat.result(chat.call(f"a{i}"), "z" * 3_000) for i in range(2)]
    state = state_for(clog)
    results = [e.seq for e in state.events(clog) if e.kind == "tool_result"]
    newest_five = set(results[-5:])
    total = view_tokens(state, clog)
    # Only the completed, unprotected results could ever be pre-folded: 7 of them.
    record = compress(
        state,
        profile_with_trigger(total - 1, reserve_ratio=0.05),
        log=clog,
        prefix=PREFIX,
        force=True,
    )
    assert set(record.pre_folded) == set(results[:-5])
    assert not newest_five & set(record.pre_folded)
    assert not set(active) & set(record.pre_folded)


def test_eviction_moves_the_middle_into_the_index_and_keeps_the_active_turn(clog):
    chat = Session(clog)
    for k in range(40):
        chat.turn(k, headline=k != 3)
    live_user = chat.user("what was answer 2?")
    count_before = clog.count()
    state = state_for(clog)
    profile = Profile(context_size=4_000)  # trigger 3200, tail 400
    record = compress(state, profile, log=clog, prefix=PREFIX)
    assert record.action in ("evict", "live_fold")
    assert record.evicted is not None
    lo, hi = record.evicted
    assert lo == 1 and hi < live_user
    assert state.live[0] == hi + 1
    assert live_user in state.live and state.active_start == live_user
    assert record.tokens_after <= profile.trigger_tokens
    (block,) = state.index.blocks
    assert block.headlines[-1].startswith("⟦task")
    assert record.evicted_headlines[3] is None
    assert NO_MILESTONE in record.evicted_headlines or None in record.evicted_headlines
    assert clog.count() == count_before  # nothing deleted, nothing written
    view = record.view
    assert view is not None
    assert_no_orphans(view.messages())
    first_live = view.messages()[1]
    assert first_live["role"] == "user" and SEAM_BANNER in first_live["content"]
    assert first_live["content"].endswith("what was answer 2?")


def test_a_turn_without_a_headline_shows_no_milestone(clog):
    chat = Session(clog)
    for k in range(12):
        chat.turn(k, headline=False)
    chat.user("live")
    state = state_for(clog)
    compress(state, Profile(context_size=4_000), log=clog, prefix=PREFIX)
    assert state.index.blocks[0].headlines == (NO_MILESTONE,)


@given(
    groups=st.lists(
        st.tuples(st.integers(0, 3), st.integers(10, 3_000), st.booleans()),
        min_size=3,
        max_size=25,
    ),
    context=st.integers(2_000, 9_000),
)
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_eviction_never_leaves_an_orphan_tool_message(clog, groups, context):
    # Every example writes a session of its own into the one log (a fresh database per
    # example cost most of this test's time on PostgreSQL); eviction reads its session
    # alone, so the sessions written before it must change nothing, and a replayed
    # example (Hypothesis' shrinking) is the same session on a fresh id.
    session = f"orphans-{next(_EXAMPLES)}"
    chat = Session(clog, session)
    for k, (calls, size, text_first) in enumerate(groups):
        chat.user(f"q{k}")
        if text_first:
            chat.reply(f"thinking {k}")
        ids = [chat.call(f"c{k}_{i}") for i in range(calls)]
        for cid in ids:
            chat.result(cid, "w" * size)
        chat.reply(f"done {k}")
    chat.user("live")
    state = state_for(clog, session)
    try:
        record = compress(state, Profile(context_size=context), log=clog, prefix=PREFIX)
    except ContextWindowUnfit:
        return
    assert record.view is not None
    assert_no_orphans(record.view.messages())
    state.index.check()
    live = state.events(clog)
    assert live[0].kind != "tool_result"
    assert {event.session_id for event in live} == {session}


def test_live_results_fold_one_at_a_time_with_the_active_turn_last(clog):
    chat = Session(clog)
    chat.turn(0, result_chars=300)
    chat.user("live")
    active = [chat.result(chat.call(f"a{i}"), "z" * 4_000) for i in range(3)]
    state = state_for(clog)
    profile = Profile(context_size=3_000)  # trigger 2400: the active turn alone is ~3000
    record = compress(state, profile, log=clog, prefix=PREFIX)
    assert record.action == "live_fold"
    assert record.active_folded and set(record.active_folded) <= set(active)
    assert len(record.active_folded) < 3  # stopped as soon as it fit
    assert record.tokens_after <= profile.trigger_tokens
    text = "\n".join(str(m.get("content")) for m in record.view.messages())
    assert FOLD_MARK in text and "ms.recall_tool('call_2')" in text


def test_an_eviction_folds_a_long_active_turns_older_results_in_the_same_rewrite(clog):
    # The cut never enters the active turn; what stays of it over the tail is folded at the
    # eviction (which rewrites the view anyway), not left to bring the next eviction sooner.
    chat = Session(clog)
    for k in range(6):
        chat.turn(k)
    chat.user("live")
    active = [chat.result(chat.call(f"a{i}"), f"a{i} " + "z" * 1_600) for i in range(8)]
    state = state_for(clog)
    profile = Profile(context_size=8_000)  # trigger 6,400, tail 800
    record = compress(state, profile, log=clog, prefix=PREFIX)
    assert record.action == "evict" and record.evicted is not None
    # The three oldest results of the active turn are folded, the five newest stay whole.
    assert record.active_folded == tuple(active[:3])
    assert not set(active[3:]) & state.folded
    assert record.tokens_after <= profile.trigger_tokens
    text = "\n".join(str(m.get("content")) for m in record.view.messages())
    assert "ms.recall_tool('call_7')" in text and "a7 zzz" in text
    state.index.check()


def test_an_eviction_folds_nothing_when_the_tail_fits(clog):
    chat = Session(clog)
    for k in range(8):
        chat.turn(k)
    chat.user("live")
    state = state_for(clog)
    record = compress(state, Profile(context_size=4_000), log=clog, prefix=PREFIX)
    assert record.action == "evict"
    assert record.active_folded == () and record.live_folded == ()


def test_an_active_turn_too_big_for_the_window_is_refused_with_numbers(clog):
    chat = Session(clog)
    chat.turn(0)
    chat.user("q " * 3_000)
    state = state_for(clog)
    profile = Profile(context_size=1_000)
    with pytest.raises(ContextWindowUnfit) as caught:
        compress(state, profile, log=clog, prefix=PREFIX)
    err = caught.value
    assert err.hard_limit == profile.hard_limit and err.tokens > err.hard_limit
    assert f"{err.tokens:,}" in str(err) and "hard limit is 950" in str(err)
    assert clog.count() == 5


def test_the_folded_pointer_says_exactly_how_to_recover_the_result(clog):
    chat = Session(clog)
    for k in range(8):
        chat.turn(k)
    chat.user("live")
    state = state_for(clog)
    profile = profile_with_trigger(view_tokens(state, clog) - 10, reserve_ratio=0.7)
    record = compress(state, profile, log=clog, prefix=PREFIX)
    assert record.action == "prefold"
    seq = record.pre_folded[0]
    tool_messages = [m for m in record.view.messages() if m["role"] == "tool"]
    folded = [m for m in tool_messages if m["content"].startswith(FOLD_MARK)]
    assert len(folded) == len(record.pre_folded) == 3
    cid = clog.get(seq).tool_call_id
    pointer = next(m for m in folded if m["tool_call_id"] == cid)
    assert f"ms.recall_tool('{cid}')" in pointer["content"]
    assert [e.seq for e in clog.by_tool_call(cid)][-1] == seq  # still there, verbatim


def test_the_report_counts_each_section_from_stored_counts(clog, monkeypatch):
    chat = Session(clog)
    for k in range(40):
        chat.turn(k)
    chat.user("live")
    state = state_for(clog)
    profile = Profile(context_size=4_000)
    record = compress(state, profile, log=clog, prefix=PREFIX, digest="rows: list len=4")
    report = record.view.report
    assert report.total == sum(report.sections().values()) == record.tokens_after
    assert report.prefix == PREFIX.tokens
    assert report.index > 0 and report.digest > 0 and report.tail > 0
    assert (report.trigger_tokens, report.hard_limit) == (3_200, 3_800)

    # Once the live events are cached a view is built without reading the log at all.
    def refuse(*a, **k):
        raise AssertionError("the log was read")

    monkeypatch.setattr(clog, "session_events", refuse)
    monkeypatch.setattr(clog, "range", refuse)
    again = build_view(state, profile, log=clog, prefix=PREFIX, digest="rows: list len=4")
    assert again.report == report


def test_checkpoint_round_trips_and_a_resumed_session_adds_nothing_twice(clog):
    chat = Session(clog)
    for k in range(20):
        chat.turn(k)
    chat.user("live")
    state = state_for(clog)
    profile = Profile(context_size=8_000)
    compress(state, profile, log=clog, prefix=PREFIX)
    data = json.loads(json.dumps(state.to_checkpoint()))
    resumed = ContextState.from_checkpoint(data)
    assert resumed.to_checkpoint() == state.to_checkpoint()
    original = build_view(state, profile, log=clog, prefix=PREFIX).messages()
    assert build_view(resumed, profile, log=clog, prefix=PREFIX).messages() == original

    assert resumed.sync(clog) == []  # nothing new: nothing appended twice to the view
    assert resumed.live == state.live
    new_seq = chat.user("after the restart")
    assert [e.seq for e in resumed.sync(clog)] == [new_seq]
    assert resumed.live[-1] == new_seq and resumed.live.count(new_seq) == 1
    assert resumed.active_start == new_seq


def test_a_broken_checkpoint_is_refused(clog):
    state = ContextState.new(S)
    data = state.to_checkpoint()
    data["live"] = [3, 2]
    with pytest.raises(ScrollError, match="strictly increasing"):
        ContextState.from_checkpoint(data)
    data = state.to_checkpoint()
    data["folded"] = [9]
    with pytest.raises(ScrollError, match="folded"):
        ContextState.from_checkpoint(data)
    with pytest.raises(ScrollError, match="version"):
        ContextState.from_checkpoint({"version": 7})


def test_other_sessions_events_never_enter_the_view(clog):
    chat, other = Session(clog), Session(clog, "other")
    for k in range(15):
        chat.turn(k)
        other.turn(k)
    chat.user("live")
    state = state_for(clog)
    assert {e.session_id for e in state.events(clog)} == {S}
    compress(state, Profile(context_size=6_000), log=clog, prefix=PREFIX)
    state.index.check()
    assert {e.session_id for e in state.events(clog)} == {S}


def test_force_evicts_even_under_the_trigger(clog):
    chat = Session(clog)
    for k in range(20):
        chat.turn(k, result_chars=100)
    chat.user("live")
    state = state_for(clog)
    profile = Profile(context_size=50_000, reserve_ratio=0.01)
    assert compress(state, profile, log=clog, prefix=PREFIX).action == "none"
    record = compress(state, profile, log=clog, prefix=PREFIX, force=True)
    assert record.forced and record.evicted is not None


class FakeDigest:
    def render(self) -> str:
        return "rows: list[Hit] len=40\ntotal: int = 7"


def test_a_namespace_digest_sits_between_the_index_and_the_live_turn(clog):
    chat = Session(clog)
    for k in range(40):
        chat.turn(k)
    chat.user("live")
    state = state_for(clog)
    record = compress(
        state, Profile(context_size=4_000), log=clog, prefix=PREFIX, digest=FakeDigest()
    )
    archive = record.view.archive
    assert archive.index("[scroll index]") < archive.index("rows: list[Hit] len=40")
    assert archive.index("total: int = 7") < archive.index(SEAM_BANNER)
    assert archive.endswith(SEAM_BANNER)


def test_without_an_index_the_archive_is_only_the_digest(clog):
    chat = Session(clog)
    chat.turn(0)
    state = state_for(clog)
    view = build_view(state, Profile(), log=clog, prefix=PREFIX, digest=FakeDigest())
    assert view.report.index == 0 and SEAM_BANNER not in view.archive
    assert view.messages()[0] == {"role": "system", "content": PREFIX.system}
    assert build_view(state, Profile(), log=clog, prefix=PREFIX).archive == ""
