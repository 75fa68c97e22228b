"""The retrieval bench's fairness rules: the data set's baseline, the split, dev-only tuning."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from bench._locomo_baseline import (
    Item,
    evidence_ids,
    load_items,
    per_conversation_indexes,
    turn_document,
)
from bench._locomo_split import DEV, TEST, split_of
from bench._retrieval_tune import tune_on_dev
from scroll_core import SearchTuning

LOCOMO = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo" / "locomo10.json"


def _sample(sample_id: str, turns: list[dict[str, Any]], qa: list[dict[str, Any]]) -> dict:
    return {
        "sample_id": sample_id,
        "conversation": {
            "speaker_a": "Ann",
            "speaker_b": "Bob",
            "session_2_date_time": "1:00 pm on 2 May, 2023",
            "session_2": [t for t in turns if t["dia_id"].startswith("D2:")],
            "session_1_date_time": "1:00 pm on 1 May, 2023",
            "session_1": [t for t in turns if t["dia_id"].startswith("D1:")],
        },
        "qa": qa,
    }


TWO_CONVERSATIONS = [
    _sample(
        "conv-26",
        [
            {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a puppy."},
            {
                "speaker": "Bob",
                "dia_id": "D1:2",
                "text": "Look at this!",
                "blip_caption": "a photo of a lighthouse at dusk",
            },
            {"speaker": "Ann", "dia_id": "D2:1", "text": "We went kayaking."},
        ],
        [
            {"question": "What did Ann adopt?", "evidence": ["D1:1"], "category": 4},
            {"question": "Where?", "evidence": ["D1:2; D2:1", "D9:9"], "category": 1},
            {"question": "Empty?", "evidence": [], "category": 5},
            {"question": "Broken?", "evidence": ["D"], "category": 4},
        ],
    ),
    _sample(
        "conv-30",
        [{"speaker": "Cy", "dia_id": "D1:1", "text": "My puppy loves the lighthouse."}],
        [{"question": "What does Cy's puppy love?", "evidence": ["D1:1"], "category": 4}],
    ),
]


def test_the_baseline_indexes_speaker_and_text_plus_the_caption_per_conversation():
    indexes = per_conversation_indexes(TWO_CONVERSATIONS)
    try:
        assert set(indexes) == {"conv-26", "conv-30"}
        assert indexes["conv-26"].documents() == [
            "Ann: I adopted a puppy.",
            "Bob: Look at this! a photo of a lighthouse at dusk",
            "Ann: We went kayaking.",
        ]
        # The caption is searchable, and each conversation's turns stay in its own index.
        assert indexes["conv-26"].search("lighthouse", 10) == [("conv-26", "D1:2")]
        assert indexes["conv-30"].search("lighthouse", 10) == [("conv-30", "D1:1")]
        # The speaker is a word of the turn, and porter folds "adopting" to "adopt".
        assert indexes["conv-26"].search("Bob", 10) == [("conv-26", "D1:2")]
        assert indexes["conv-26"].search("adopting", 10) == [("conv-26", "D1:1")]
    finally:
        for index in indexes.values():
            index.close()


def test_the_baseline_without_captions_drops_only_the_caption():
    indexes = per_conversation_indexes(TWO_CONVERSATIONS, captions=False)
    try:
        assert indexes["conv-26"].documents()[1] == "Bob: Look at this!"
        assert indexes["conv-26"].search("lighthouse", 10) == []
    finally:
        for index in indexes.values():
            index.close()


def test_a_question_of_stop_words_or_query_syntax_is_only_words():
    indexes = per_conversation_indexes(TWO_CONVERSATIONS)
    try:
        index = indexes["conv-26"]
        assert index.search('body:"puppy" OR (NEAR', 10) == [("conv-26", "D1:1")]
        assert index.search("", 10) == []
    finally:
        for index in indexes.values():
            index.close()


def test_turn_document_ignores_an_empty_caption():
    assert turn_document({"speaker": "Ann", "text": "hi", "blip_caption": ""}) == "Ann: hi"


def test_evidence_ids_split_joined_ids_and_drop_malformed_ones():
    assert evidence_ids(["D8:6; D9:17"]) == ["D8:6", "D9:17"]
    assert evidence_ids(["D9:1 D4:4 D4:6", "D4:4"]) == ["D9:1", "D4:4", "D4:6"]
    assert evidence_ids(["D", "D:11:26", ""]) == []


def test_items_keep_only_evidence_that_resolves_and_count_what_was_dropped():
    items, counts = load_items(TWO_CONVERSATIONS)
    by_question = {item.question: item for item in items}
    assert set(by_question) == {"What did Ann adopt?", "Where?", "What does Cy's puppy love?"}
    assert by_question["Where?"].evidence == {("conv-26", "D1:2"), ("conv-26", "D2:1")}
    assert by_question["Where?"].category == "multi_hop"
    assert counts == {
        "items_total": 5,
        "items_without_evidence": 2,
        "unresolved_evidence_ids": 1,
    }


def test_the_split_is_disjoint_and_covers_all_ten_conversations():
    assert not set(DEV) & set(TEST)
    assert len(DEV) == len(TEST) == 5
    if LOCOMO.is_file():
        ids = [sample["sample_id"] for sample in json.loads(LOCOMO.read_text())]
        assert sorted(ids) == sorted(DEV + TEST)
    assert {split_of(c) for c in DEV} == {"dev"}
    assert {split_of(c) for c in TEST} == {"test"}
    with pytest.raises(ValueError, match="conv-99"):
        split_of("conv-99")


def _items() -> list[Item]:
    return [
        Item(conversation, f"question {n}", "single_hop", frozenset({(conversation, "D1:1")}))
        for n, conversation in enumerate(DEV + TEST + DEV)
    ]


def test_tuning_hands_the_measure_only_dev_items():
    seen: list[Item] = []
    items = _items()

    def measure(tuning: SearchTuning, chosen: Sequence[Item]) -> dict[str, float]:
        seen.extend(chosen)
        # Prefer a larger name weight, so the choice visibly follows the measure.
        name = tuning.rank_weights[2]
        return {"recall_at_5": name, "recall_at_10": 0.0, "hit_at_10": 0.0}

    choice = tune_on_dev(items, measure)
    assert seen, "the measure was never called"
    assert {item.conversation for item in seen} == set(DEV)
    assert all(split_of(item.conversation) == "dev" for item in seen)
    assert choice.dev_items == sum(1 for item in items if item.conversation in DEV)
    assert choice.tuning.rank_weights[2] == 2.0


def test_tuning_keeps_todays_constants_when_nothing_beats_them():
    def flat(tuning: SearchTuning, chosen: Sequence[Item]) -> dict[str, float]:
        return {"recall_at_5": 0.5, "recall_at_10": 0.5, "hit_at_10": 0.5}

    assert tune_on_dev(_items(), flat).tuning == SearchTuning()


def test_tuning_refuses_when_there_is_no_dev_item():
    test_only = [item for item in _items() if item.conversation in TEST]

    def never(tuning: SearchTuning, chosen: Sequence[Item]) -> dict[str, float]:
        raise AssertionError("measured without dev items")

    with pytest.raises(ValueError, match="no dev-split items"):
        tune_on_dev(test_only, never)


@pytest.fixture
def retrieval(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "bench"))
    import importlib

    return importlib.import_module("bench.retrieval")


def test_each_ablation_row_switches_one_technique_against_the_shipped_search(retrieval):
    rows = retrieval.ablation_tunings()
    shipped = rows["shipped"][1]
    assert shipped == SearchTuning()
    # The settings, not what they load (the tree ranker's model).
    fields = [f.name for f in dataclasses.fields(SearchTuning) if f.init]
    # The rows that move one technique with several knobs (feedback: docs, terms, mix).
    knobs = {"shipped": 0, "coverage_proximity": 2, "no_term_features": 2}
    knobs.update({"feedback": 3, "no_feedback": 3})
    # Window coverage is measured on the hand formula; the pool's own ranker is fitted there.
    knobs.update({"window": 2, "ranker_pool_100": 2})
    # Whole-log rarity changes what the rare features mean: its ranker is refitted with it.
    knobs.update({"term_rarity_log": 2})
    for name, (_, tuning) in rows.items():
        changed = [f for f in fields if getattr(tuning, f) != getattr(shipped, f)]
        assert len(changed) == knobs.get(name, 1), name
    techniques = {"speaker", "feedback", "diversity", "exact", "window", "ranker", "pool_100"}
    techniques |= {"term_rarity_log", "day", "refit", "trees"}
    assert techniques <= {n.removeprefix("no_") for n in rows}
    assert rows["no_ranker"][1].ranker_weights == () and shipped.ranker_weights


def test_the_ablation_times_every_row_on_the_same_synthetic_log(retrieval, tmp_path):
    tunings = {"shipped": SearchTuning(), "proximity": SearchTuning(proximity_weight=1.0)}
    latency = retrieval.synthetic_latency(tunings, 1500, tmp_path)
    assert set(latency) == set(tunings)
    for row in latency.values():
        assert 0 < row["p50_ms"] <= row["p99_ms"]


def test_the_held_out_questions_follow_their_rules_and_ask_nothing_of_locomo(tmp_path):
    from bench._heldout import WORDS, build_items, heldout_log

    data = LOCOMO.parents[1]
    with heldout_log(data, tmp_path) as log:
        items = build_items(tmp_path / "heldout.sqlite3")
        events = {
            e.seq: e for s in log.sessions() for e in log.session_events(s.session_id, limit=None)
        }
    families = {item.family for item in items}
    assert families == {"note", "words", "reply"}
    for item in items:
        evidence = events[item.evidence]
        assert not evidence.session_id.startswith("locomo:")
        if item.family == "note":
            # The note comes after the user message it answers and is searched before itself.
            assert '"type": "user_message"' in (evidence.content or "")
            assert item.before_seq is not None and item.before_seq > item.evidence
            assert events[item.before_seq].kind == "model_turn"
        elif item.family == "reply":
            # A reply the agent sent, asked before itself; the evidence a user's message.
            reply = events[item.before_seq]
            assert reply.kind == "model_turn" and item.before_seq > item.evidence
            if reply.name == "send_message":  # Letta: the message the call sent
                sent = json.loads((reply.content or "").split(" ", 1)[1])["message"]
                assert item.question == sent
            else:  # Claude Code: the assistant's own text
                assert reply.name is None and item.question == reply.content
            assert evidence.kind == "context_msg" and evidence.role == "user"
        else:
            words = item.question.split()
            assert len(words) == WORDS
            assert all(w in (evidence.content or "").casefold() for w in words)


def test_technique_tuning_reads_dev_items_only_and_says_whether_each_gains():
    from bench._retrieval_tune import tune_techniques

    seen: list[str] = []

    def measure(tuning: SearchTuning, chosen: Sequence[Item]) -> dict[str, float]:
        seen.extend(item.conversation for item in chosen)
        gain = 0.1 if tuning.speaker_weight == 1.0 else 0.0
        return {"recall_at_5": 0.5 + gain, "recall_at_10": 0.5, "hit_at_10": 0.5}

    grid = {
        "speaker": [{"speaker_weight": 0.5}, {"speaker_weight": 1.0}],
        "exact": [{"exact_weight": 1.0}],
    }
    out = tune_techniques(_items(), measure, grid=grid)
    assert set(seen) <= set(DEV) and seen
    assert out["speaker"]["chosen"] == {"speaker_weight": 1.0} and out["speaker"]["gains_on_dev"]
    assert not out["exact"]["gains_on_dev"]


def test_the_dated_held_out_questions_name_the_evidences_day_or_another(retrieval, tmp_path):
    import importlib

    from bench._heldout import HeldoutItem
    from scroll_core import EventLog

    dates = importlib.import_module("bench.heldout_dates")
    with EventLog(tmp_path / "log.sqlite3") as log:
        seqs = [
            log.append(session_id=session, kind="chat_turn", role="user", content=text,
                       created_at=f"{day}T10:00:0{i}Z")
            for i, (session, day, text) in enumerate([
                ("cc:a", "2025-04-01", "the parser drops trailing commas"),
                ("cc:a", "2025-04-01", "fixed in the tokenizer"),
                ("cc:b", "2025-06-14", "release notes drafted"),
            ])
        ]  # fmt: skip
        items = [
            HeldoutItem("words", "parser trailing commas", seqs[0], None),
            HeldoutItem("note", "ignored: not a words item", seqs[1], None),
            HeldoutItem("words", "release notes drafted", seqs[2], None),
        ]
        asked = dates.variants(log, items)
        assert [i.question for i in asked["plain"]] == [
            "parser trailing commas",
            "release notes drafted",
        ]
        assert [i.question for i in asked["right_day"]] == [
            "parser trailing commas on 01 April 2025",
            "release notes drafted on 14 June 2025",
        ]
        # Another day: the busiest one that is not the evidence's.
        assert [i.question for i in asked["other_day"]] == [
            "parser trailing commas on 14 June 2025",
            "release notes drafted on 01 April 2025",
        ]
        log.search_tuning = dates.SearchTuning()
        assert dates.score(log, asked["plain"])["recall_at_10"] == 1.0
    with EventLog(tmp_path / "one_day.sqlite3") as log:
        seq = log.append(session_id="cc:a", kind="chat_turn", role="user", content="one day",
                         created_at="2025-04-01T10:00:00Z")  # fmt: skip
        with pytest.raises(ValueError, match="one day: no other day to name"):
            dates.variants(log, [HeldoutItem("words", "one day", seq, None)])


def _every_table_key_resolves(result: dict[str, Any]) -> dict[str, Any]:
    """The figures of a bench result whose README tables name only figures it has."""
    figures = result["figures"]
    for table in result["readme_tables"]:
        for row in table["rows"]:
            for column in table["columns"]:
                assert table["key"].format(row=row, column=column) in figures
    return figures


def test_the_dated_check_publishes_each_tuning_variant_and_metric(retrieval):
    import importlib

    dates = importlib.import_module("bench.heldout_dates")
    result = dates.run(LOCOMO.parents[1])
    figures = _every_table_key_resolves(result)
    assert figures["items"] > 0
    # As asked, no question names a date: the date pair changes nothing.
    for metric in dates.METRICS:
        assert figures[f"dates.plain.{metric}"] == figures[f"shipped.plain.{metric}"]
    # Naming another day than the evidence's costs the date pair, not the shipped search.
    assert figures["dates.other_day.recall_at_5"] < figures["shipped.other_day.recall_at_5"]


def _dated_sample(sample_id: str, days: list[str], turns: list[tuple[int, str]], qa: list) -> dict:
    conversation: dict[str, Any] = {"speaker_a": "Ann", "speaker_b": "Bob"}
    for number, day in enumerate(days, start=1):
        conversation[f"session_{number}_date_time"] = f"1:00 pm on {day}"
        texts = [text for session, text in turns if session == number]
        conversation[f"session_{number}"] = [
            {"speaker": "Ann", "dia_id": f"D{number}:{i}", "text": text}
            for i, text in enumerate(texts, start=1)
        ]
    return {"sample_id": sample_id, "conversation": conversation, "qa": qa}


def test_a_day_naming_question_is_asked_again_on_the_nearest_and_furthest_other_day(
    retrieval, tmp_path
):
    import importlib

    wrong = importlib.import_module("bench.wrong_dates")
    # The helpers: every written day replaced, a month left alone; no other day, no copies.
    assert wrong.ask_on("on 3 May, 2023 and 2023-05-01, in June 2023?", "2023-06-20") == (
        "on 20 June 2023 and 20 June 2023, in June 2023?"
    )
    assert wrong.other_days("2023-05-03", {"2023-05-03"}, {"2023-05-03"}) == {}
    days = ["1 May, 2023", "3 May, 2023", "20 June, 2023"]
    turns = [(1, "I adopted a puppy."), (2, "We went kayaking at the lake."), (3, "New job!")]
    qa = [
        {"question": "Where did Ann go kayaking on 3 May, 2023?", "evidence": ["D2:1"],
         "category": 2},
        {"question": "What did Ann adopt?", "evidence": ["D1:1"], "category": 4},
        # Its evidence spans the only days it does not name: no wrong day is left to ask on.
        {"question": "What happened on 3 May, 2023?", "evidence": ["D1:1", "D3:1"],
         "category": 1},
    ]  # fmt: skip
    root = tmp_path / "data" / "locomo"
    root.mkdir(parents=True)
    (root / "locomo10.json").write_text(
        json.dumps(
            [_dated_sample("conv-30", days, turns, qa), _dated_sample("conv-26", days, turns, qa)]
        )
    )
    check = wrong.WrongDates(tmp_path / "data", tmp_path / "work")
    try:
        asked = check.variants("test")
        assert [i.question for i in asked["all"]] == [q["question"] for q in qa]
        assert [i.question for i in asked["as_asked"]] == [qa[0]["question"]]
        assert [i.question for i in asked["near"]] == ["Where did Ann go kayaking on 01 May 2023?"]
        assert [i.question for i in asked["far"]] == ["Where did Ann go kayaking on 20 June 2023?"]
        assert asked["near"][0].evidence == asked["as_asked"][0].evidence
        assert {i.conversation for v in asked.values() for i in v} == {"conv-30"}
        # The hedged fit weighs the date pair only: what it holds at 0 stays 0.
        weights = check.hedged_weights()
        assert len(weights) == len(retrieval.RANK_FEATURES)
        for name in wrong.HELD_AT_ZERO:
            assert weights[retrieval.RANK_FEATURES.index(name)] == 0.0
    finally:
        check.close()


def test_the_wrong_day_check_publishes_each_tuning_variant_and_metric(retrieval):
    import importlib

    wrong = importlib.import_module("bench.wrong_dates")
    result = wrong.run(LOCOMO.parents[1])
    figures = _every_table_key_resolves(result)
    assert figures["items.as_asked"] == figures["items.far"] > 0
    # The fit on LoCoMo as asked gains where the named day is right and loses where it is
    # far off; the shipped search reads no date at all.
    assert figures["dates.as_asked.recall_at_10"] > figures["shipped.as_asked.recall_at_10"]
    assert figures["dates.far.recall_at_5"] < figures["shipped.far.recall_at_5"]
