"""LoCoMo's answer scoring rules on small cases."""

from __future__ import annotations

import pytest

from bench.locomo_scoring import (
    LOCOMO_ABSTENTION,
    abstained,
    answer_f1,
    locomo_dates,
    multi_hop_f1,
    normalise,
    stemmed_tokens,
    token_f1,
)
from scroll_core.prompts import ABSTENTION


def test_normalise_lowercases_and_strips_punctuation_and_articles():
    assert normalise("The  Lighthouse, a Novel!") == "lighthouse novel"
    assert normalise("An apple and the pear.") == "apple pear"
    assert normalise("theatre") == "theatre"  # only whole words are articles


def test_words_are_porter_stemmed_as_the_official_scoring_does():
    assert stemmed_tokens("Running races, painted") == ["run", "race", "paint"]
    # An inflected match scores in full, as it does in LoCoMo's evaluation.py.
    assert token_f1("she paints sunrises", "painted sunrise") == pytest.approx(0.8)


def test_token_f1():
    assert token_f1("7 May 2023", "7 May 2023") == 1.0
    assert token_f1("On 7 May 2023.", "7 May 2023") == pytest.approx(2 * 0.75 * 1 / 1.75)
    assert token_f1("June", "7 May 2023") == 0.0
    assert token_f1("", "anything") == 0.0
    # Counts are clipped: a repeated word matches once per gold occurrence.
    assert token_f1("dog dog dog", "dog") == pytest.approx(0.5)


def test_multi_hop_partial_credit_over_comma_separated_parts():
    gold = "pottery, camping, painting"
    assert multi_hop_f1("painting, pottery", gold) == pytest.approx(2 / 3)
    assert multi_hop_f1("pottery, camping, painting", gold) == 1.0
    assert answer_f1("painting, pottery", gold, 1) == pytest.approx(2 / 3)
    # Other categories score the whole string: commas are dropped, words pooled.
    assert answer_f1("painting, pottery", gold, 4) == pytest.approx(0.8)


def test_open_domain_scores_only_the_first_alternative():
    assert answer_f1("likely yes", "Likely yes; she enjoys it", 3) == 1.0


def test_adversarial_items_count_only_locomo_s_two_phrases():
    assert answer_f1(LOCOMO_ABSTENTION, "self-care is important", 5) == 1.0
    assert answer_f1("Not mentioned in the conversation", "x", 5) == 1.0
    assert answer_f1("No information available.", "x", 5) == 1.0
    assert answer_f1("self-care is important", "self-care is important", 5) == 0.0
    assert answer_f1(None, "x", 5) == 0.0
    assert not abstained(None)


def test_scroll_s_own_abstention_phrase_is_not_an_abstention_to_locomo():
    # LoCoMo's rule looks for two substrings; the library's phrase has neither.
    assert not abstained(ABSTENTION)
    assert answer_f1(ABSTENTION, "self-care is important", 5) == 0.0
    assert not abstained("I don’t have that information from our conversations.")


def test_iso_dates_are_rewritten_in_locomo_s_style_for_every_arm_alike():
    assert locomo_dates("2023-05-07") == "7 May 2023"
    assert locomo_dates("the week before 2023-05-08") == "the week before 8 May 2023"
    assert locomo_dates("2023-05") == "May 2023"
    assert locomo_dates("2022") == "2022"
    assert locomo_dates("2023-13-01 and 2023-00") == "2023-13-01 and 2023-00"  # not dates
    assert answer_f1(locomo_dates("2023-05-07"), "7 May 2023", 2) == 1.0


def test_the_bench_prints_five_arms_from_the_test_split(shared_data):
    import json
    import subprocess
    import sys

    from tests.conftest import REPO

    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "bench" / "e2e.py"),
            "--json",
            "--split",
            "test",
            "--context-size",
            "4096",
            "--conversations",
            "1",
            "--questions",
            "12",
            "--sandbox",
            "process",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    envelope = json.loads(done.stdout)
    # The bench's JSON envelope: its own flat "figures" beside everything else as details.
    result = {**envelope["details"], "figures": envelope["figures"]}
    assert result["setup"]["splits"] == {"test": ["conv-30"]}
    assert result["headline"] == {"context_size": 4096, "split": "test"}
    assert result["setup"]["kernel_tier"] == "process"
    keys = {
        "answer_f1",
        "evidence_in_view",
        "evidence_recall",
        "evidence_reachable",
        "tokens_billed_per_question",
        "calls_refused",
        "ms_calls_per_question",
        "evictions_during_questions",
        "by_category",
    }
    for arm in ("none", "truncate", "summarise", "scroll", "scroll-flat"):
        assert keys <= set(result[arm]), arm
        assert result[arm]["questions"] == 12
        assert result[arm] == result["windows"]["4096"]["test"][arm]
    assert "dev" not in result["windows"]["4096"]
    figures = result["figures"]
    assert figures and all(isinstance(v, float) for v in figures.values())
    assert figures["c4096_test_scroll_flat_answer_f1"] == result["scroll-flat"]["answer_f1"]
    # The whole conversation does not fit 4,096 tokens: every call refused, nothing billed.
    assert result["none"]["calls_refused"] == 12 and result["none"]["answered"] == 0.0
    assert result["none"]["tokens_billed_per_question"] == 0.0
    # A baseline reaches only what is in its view; Scroll's arms also reach the log.
    for arm in ("truncate", "summarise"):
        assert result[arm]["evidence_reachable"] == result[arm]["evidence_in_view"]
        assert result[arm]["ms_calls_per_question"] == 0.0
        assert result[arm]["evictions_during_questions"] == 0
    for arm in ("scroll", "scroll-flat"):
        assert result[arm]["evidence_reachable"] >= result[arm]["evidence_in_view"]
        assert result[arm]["ms_calls_per_question"] > 0
    # The summaries never exceed the budget Scroll's view spent on evicted history.
    assert result["summarise"]["summary_tokens_max_over_budget"] <= 0


def test_tuning_sees_only_the_dev_split(shared_data):
    import json
    import subprocess
    import sys

    from bench._locomo_split import DEV
    from tests.conftest import REPO

    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "bench" / "e2e.py"),
            "--tune",
            "--context-size",
            "4096",
            "--conversations",
            "1",
            "--questions",
            "6",
            "--sandbox",
            "process",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    envelope = json.loads(done.stdout)
    result = {**envelope["details"], **envelope["figures"]}
    assert result["conversations"] and set(result["conversations"]) <= set(DEV)
    assert f"{result['chosen_share']:.3f}" in result["sweep"]
    for per_arm in result["sweep"].values():
        assert set(per_arm) == {"none", "truncate", "summarise", "scroll", "scroll-flat",
                                "mean_over_arms"}  # fmt: skip
    best = result["sweep"][f"{result['chosen_share']:.3f}"]["mean_over_arms"]
    assert best == max(p["mean_over_arms"] for p in result["sweep"].values())
