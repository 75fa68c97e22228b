"""The retrieval sets beside LoCoMo (issue 34): the generated assistant conversations, their
plain BM25, and choosing the bounds by the worst dev set."""

from __future__ import annotations

import json

import pytest

from bench import _assistant_sessions as assistant
from bench._other_sets import PlainSeqIndex, assistant_set, score, summarise
from bench._safe_tune import choose
from scroll_core import EventLog, SearchTuning


def test_the_generator_is_deterministic_and_long_turned():
    items = assistant.generate(seed=7, conversations=2)
    assert json.dumps(items) == json.dumps(assistant.generate(seed=7, conversations=2))
    assert json.dumps(items) != json.dumps(assistant.generate(seed=8, conversations=2))
    turns = [t for item in items for s in item["haystack_sessions"] for t in s]
    answers = [len(t["content"].split()) for t in turns if t["role"] == "assistant"]
    assert sum(answers) / len(answers) > 60  # an assistant's answers, not chat lines


def test_every_probe_points_at_turns_that_hold_what_it_asks_about():
    items = assistant.generate(conversations=4)
    probes = assistant.probes(items)
    assert {p.category for p in probes} == {
        "fact", "update", "preference", "instruction", "multi_session", "ordering", "assistant",
    }  # fmt: skip
    by_id = {item["question_id"]: item for item in items}
    for probe in probes:
        sessions = by_id[probe.conversation]["haystack_sessions"]
        turns = [sessions[s][t] for s, t in probe.evidence]
        # Distinct turns, the assistant kind on the assistant's answer, the rest on the user's.
        assert len(set(probe.evidence)) == len(probe.evidence)
        want = "assistant" if probe.category == "assistant" else "user"
        assert all(t["role"] == want for t in turns), probe
    update = next(p for p in probes if p.question == "What car do I have at the moment?")
    sessions = by_id[update.conversation]["haystack_sessions"]
    (s1, t1), (s2, t2) = update.evidence
    assert "drive a" in sessions[s1][t1]["content"]
    assert s1 < s2 and "traded in my old car" in sessions[s2][t2]["content"]


def test_the_split_is_by_conversation_position():
    assert assistant.split_of("asst-00") == "dev"
    assert assistant.split_of("asst-07") == "heldout"
    with pytest.raises(ValueError):
        assistant.split_of("conv-26")


def test_the_set_is_imported_by_the_real_importer_and_scored_against_plain(tmp_path):
    with EventLog(tmp_path / "log.sqlite3") as log:
        built = assistant_set(tmp_path, log)
        try:
            assert {i.split for i in built.items} == {"dev", "heldout"}
            item = next(i for i in built.items if i.category == "fact")
            hits = built.plain(item, 10)
            assert hits and all(isinstance(h, int) for h in hits)
            rows = score(built.items[:12], built.scroll(SearchTuning()))
            summary = summarise(built.items[:12], rows)
            assert 0.0 <= summary["dev"]["recall_at_10"] <= 1.0
            # Facts are stated in words the question repeats: plain BM25 finds them.
            facts = [i for i in built.items if i.category == "fact"]
            assert summarise(facts, score(facts, built.plain))["dev"]["recall_at_10"] > 0.5
        finally:
            built.close()


def test_the_plain_index_honours_before_seq():
    index = PlainSeqIndex([(3, "the red kettle"), (9, "a red kettle again")])
    try:
        assert sorted(index.search("red kettle", 10)) == [3, 9]
        assert index.search("red kettle", 10, before_seq=9) == [3]
    finally:
        index.close()


def test_the_bounds_are_chosen_by_the_worst_dev_set_not_the_mean():
    plain = {"a": dict.fromkeys(("recall_at_1", "recall_at_5", "recall_at_10"), 0.5)}
    plain["b"] = dict(plain["a"])
    # Setting (1.0, -1, 0) gains a lot on a and loses a little on b; (0.5, -1, 0) gains a
    # little on both: the mean prefers the first, the worst the second.
    table = {(1.0, -1, 0): (0.9, 0.49), (0.5, -1, 0): (0.55, 0.51)}
    seen = []

    def measure(name: str):
        def run(tuning: SearchTuning) -> dict[str, float]:
            seen.append((name, tuning.ranker_share))
            value = table[(tuning.ranker_share, tuning.bm25_margin, tuning.long_turn_words)]
            return dict.fromkeys(plain[name], value[0 if name == "a" else 1])

        return run

    out = choose(plain, {"a": measure("a"), "b": measure("b")}, grid=list(table))
    assert out["chosen"]["setting"] == {
        "ranker_share": 0.5, "bm25_margin": -1, "long_turn_words": 0,
    }  # fmt: skip
    assert out["chosen"]["worst"] == pytest.approx(0.01)
    assert len(seen) == 4 and len(out["trials"]) == 2
