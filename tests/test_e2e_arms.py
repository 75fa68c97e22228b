"""The end-to-end bench's five arms on a tiny synthetic conversation.

Each arm's measurement is checked against what its model was actually given: the none arm
refuses a prompt over the window, truncate keeps the newest turns, the extractive summary
stays within its budget and runs no Scroll code, and Scroll's two arms reach a fact that was
evicted from their view.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bench._e2e_arms import (
    MESSAGE_OVERHEAD,
    Conversation,
    HistoryTurn,
    Item,
    evidence_keys,
    present,
    run_baseline,
    run_scroll_arm,
    transcript_line,
)
from bench._extractive import SUMMARY_HEADER, ExtractiveSummariser, salience
from bench.locomo_scoring import LOCOMO_ABSTENTION
from scroll_core import EventLog
from scroll_core.kernel import KernelConfig, KernelManager
from scroll_core.models import PolicyModel
from scroll_core.profile import Profile
from scroll_core.view import MESSAGE_OVERHEAD_TOKENS

FACT = "Since 2019 my okapi Zed eats mango leaves."
QUESTION = "What does the okapi Zed eat?"
FILLER = [
    "The weather was grey and we stayed inside most of the afternoon.",
    "I tidied the garage and found some old photographs there.",
    "We watched a long film and then went to bed early.",
    "Work was calm today, mostly emails and a short meeting.",
]


def _conversation(blocks: int = 6, per_block: int = 8) -> Conversation:
    turns: list[HistoryTurn] = []
    for block in range(1, blocks + 1):
        for i in range(per_block):
            first = block == 1 and i == 0
            speaker = "Ann" if i % 2 == 0 else "Bob"
            text = FACT if first else FILLER[(block + i) % len(FILLER)]
            dia_id = f"D{block}:{i + 1}"
            created = f"2023-05-{block:02d}T10:{i:02d}:00Z"
            draft = {
                "session_id": "locomo:conv-t",
                "kind": "chat_turn",
                "role": "user",
                "name": speaker,
                "content": text,
                "created_at": created,
                "dedup_key": f"conv-t:{dia_id}",
                "metadata": {"dia_id": dia_id, "locomo_session": block},
            }
            turns.append(HistoryTurn(dia_id, speaker, text, created, block, draft))
    items = [Item(4, QUESTION, "mango leaves", ("D1:1",))]
    return Conversation("conv-t", turns, items)


def _model(size: int) -> PolicyModel:
    return PolicyModel(context_size=size, abstention=LOCOMO_ABSTENTION)


@pytest.fixture
def counter(log):
    return log.tokens


def test_the_baselines_count_messages_as_scroll_s_view_does():
    assert MESSAGE_OVERHEAD == MESSAGE_OVERHEAD_TOKENS


def test_none_refuses_a_prompt_over_the_window_and_counts_it_a_failure(counter):
    conv = _conversation()
    profile = Profile(context_size=1024)
    [outcome] = run_baseline("none", conv, conv.items, profile, counter, _model(1024))
    assert outcome.refused and outcome.answer is None
    assert outcome.prompt_tokens > profile.hard_limit
    assert outcome.tokens_billed == 0 and not outcome.in_view


def test_none_answers_from_the_whole_history_when_it_fits(counter):
    conv = _conversation()
    profile = Profile(context_size=32_768)
    [outcome] = run_baseline(
        "none", conv, conv.items, profile, counter, _model(32_768), keep_messages=True
    )
    assert not outcome.refused
    assert outcome.in_view == outcome.reached == {"D1:1"}
    assert outcome.answer is not None and "mango leaves" in outcome.answer
    assert outcome.final_messages is not None
    assert len(outcome.final_messages) == len(conv.turns) + 2  # system, turns, question


def test_truncate_keeps_the_newest_turns_that_fit(counter):
    conv = _conversation()
    profile = Profile(context_size=1024)
    [outcome] = run_baseline(
        "truncate", conv, conv.items, profile, counter, _model(1024), keep_messages=True
    )
    assert not outcome.refused and outcome.prompt_tokens <= profile.hard_limit
    assert outcome.final_messages is not None
    shown = [m["content"] for m in outcome.final_messages[1:-1]]
    lines = [transcript_line(t) for t in conv.turns]
    assert shown == lines[len(lines) - len(shown) :]  # a suffix: the newest turns
    assert 0 < len(shown) < len(lines)
    # The fact is in the oldest turn, so it is not in view and this arm cannot reach it.
    assert outcome.in_view == set() and outcome.answer == LOCOMO_ABSTENTION


def test_summarise_stays_within_its_budget_and_runs_no_scroll_code(counter):
    conv = _conversation()
    profile = Profile(context_size=1024)
    budgets = [120]
    called: set[str] = set()

    def profiler(frame, event, arg):
        if event == "call":
            called.add(frame.f_code.co_filename)

    sys.setprofile(profiler)
    try:
        [outcome] = run_baseline(
            "summarise", conv, conv.items, profile, counter, _model(1024), budgets,
            keep_messages=True,
        )  # fmt: skip
    finally:
        sys.setprofile(None)
    assert outcome.summary_budget == 120
    assert outcome.summary_tokens is not None and 0 < outcome.summary_tokens <= 120
    assert outcome.prompt_tokens <= profile.hard_limit
    assert outcome.final_messages is not None
    assert outcome.final_messages[1]["content"].startswith(SUMMARY_HEADER)
    # No compress, no index, no view, no Event Log, no kernel, no ms: only the model ran.
    core = Path(__file__).resolve().parents[1] / "scroll_core"
    ran = {Path(f).relative_to(core).as_posix() for f in called if f.startswith(str(core))}
    assert ran, "the policy model should have run"
    # The policy model shares only the query tokenizer (store/fts_query.py) with the log.
    managing = ("eviction.py", "index.py", "view.py")
    outside = ("kernel/", "agent/", "replay/", "store/")
    assert not {
        f for f in ran if f in managing or (f.startswith(outside) and f != "store/fts_query.py")
    }


def test_the_extractive_summary_prefers_entities_numbers_and_dates(counter):
    idf: dict[str, float] = {}
    assert salience(FACT, idf) > salience(FILLER[0], idf)
    conv = _conversation()
    summariser = ExtractiveSummariser(conv.turns, counter)
    block = 8  # the first block's turns: its most salient sentence survives a small budget
    text = summariser.summary(block, 60)
    assert FACT in text and FILLER[0] not in text
    assert counter.count(text) + MESSAGE_OVERHEAD <= 60
    assert summariser.summary(block, 5) == ""  # not even the header fits
    # The same turns and budget give the same summary.
    assert ExtractiveSummariser(conv.turns, counter).summary(block, 60) == text


def test_presence_is_measured_by_sentence_not_assumed():
    keys = {"D1:1": evidence_keys("Hi! " + FACT), "D2:1": evidence_keys(FILLER[0])}
    shown = [{"role": "user", "content": f"[2023-05-01 10:00] Ann: {FACT}"}]
    assert present(["D1:1", "D2:1", "D9:9"], keys, shown) == {"D1:1"}
    assert present(["D1:1"], keys, [{"role": "tool", "content": "*[4] ... unrelated"}]) == set()


@pytest.mark.parametrize("arm", ["scroll", "scroll-flat"])
def test_scroll_arms_reach_evicted_evidence(tmp_path, arm):
    conv = _conversation(blocks=12, per_block=12)
    profile = Profile(context_size=4096)  # Scroll's prefix alone is over 1,024
    with (
        EventLog(tmp_path / "eventlog.sqlite3") as log,
        KernelManager(KernelConfig(sandbox="process"), pool_size=0) as kernels,
    ):
        [outcome], spans = run_scroll_arm(
            arm, log, conv, conv.items, profile, kernels, _model(4096), keep_messages=True
        )
        fact_seq = next(
            e.seq for e in log.session_events(f"locomo:conv-t:{arm}", limit=None)
            if e.content == FACT
        )  # fmt: skip
    assert spans and any(lo <= fact_seq <= hi for lo, hi in spans)  # the fact was evicted
    assert outcome.in_view == set()  # and was not in the view the question met
    assert outcome.addressable == {"D1:1"}  # yet its index covers it and ms.expand reads it
    assert outcome.reached == {"D1:1"}  # and the recall program brought it to the model
    assert outcome.ms_calls > 0
    assert outcome.answer is not None and "mango leaves" in outcome.answer


def test_an_arm_that_is_not_one_is_refused(counter, tmp_path):
    conv = _conversation()
    with pytest.raises(ValueError, match="not a baseline arm"):
        run_baseline("scroll", conv, conv.items, Profile(context_size=1024), counter, _model(1024))
    with pytest.raises(ValueError, match="one budget per item"):
        run_baseline(
            "summarise", conv, conv.items, Profile(context_size=1024), counter, _model(1024), []
        )
