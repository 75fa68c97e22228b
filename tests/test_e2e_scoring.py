"""LoCoMo's answer scoring rules on small cases."""

from __future__ import annotations

import pytest

from bench.locomo_scoring import abstained, answer_f1, multi_hop_f1, normalise, token_f1
from scroll_core.prompts import ABSTENTION


def test_normalise_lowercases_and_strips_punctuation_and_articles():
    assert normalise("The  Lighthouse, a Novel!") == "lighthouse novel"
    assert normalise("An apple and the pear.") == "apple pear"
    assert normalise("theatre") == "theatre"  # only whole words are articles


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


def test_adversarial_items_count_only_abstention():
    assert answer_f1(ABSTENTION, "self-care is important", 5) == 1.0
    assert answer_f1("Not mentioned in the conversation", "x", 5) == 1.0
    assert answer_f1("No information available.", "x", 5) == 1.0
    assert answer_f1("self-care is important", "self-care is important", 5) == 0.0
    assert answer_f1(None, "x", 5) == 0.0
    assert abstained("I don’t have that information from our conversations.")
    assert not abstained(None)


def test_the_bench_prints_the_three_policies_side_by_side(shared_data):
    import json
    import subprocess
    import sys

    from tests.conftest import REPO

    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "bench" / "e2e.py"),
            "--json",
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
    # The bench's JSON holds flat figures ("scroll.answer_f1") and the rest as details.
    result = envelope["details"]
    for flat, value in envelope["figures"].items():
        *parents, leaf = flat.split(".")
        node = result
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    keys = {
        "evidence_recall",
        "answer_f1",
        "abstention_accuracy",
        "median_input_tokens",
        "ms_calls_per_question",
        "by_category",
    }
    for policy in ("scroll", "summarise", "none"):
        assert keys <= set(result[policy]), policy
        assert result[policy]["questions"] == 12
    assert result["setup"]["kernel_tier"] == "process"
    # Scroll reads evicted evidence back; summarise-and-discard destroyed it; an unmanaged
    # prompt of the whole conversation does not fit a 4,096-token window at all.
    assert result["scroll"]["evidence_recall"] > result["summarise"]["evidence_recall"]
    assert result["scroll"]["evidence_reachable"] == 1.0 > result["summarise"]["evidence_reachable"]
    assert result["scroll"]["ms_calls_per_question"] > 0
    assert result["none"]["answered"] == 0.0
    assert result["none"]["median_input_tokens"] > result["setup"]["context_size"]
