"""The qualification suite against scripted endpoints of known behaviour over loopback HTTP
(``qualify_endpoints``), each getting the scorecard it deserves, and against the rule-based
baseline."""

from __future__ import annotations

import pytest
from gateway_upstream import ScriptedUpstream
from qualify_endpoints import dump, make

from scroll_core.errors import ConfigError
from scroll_core.kernel import KernelConfig
from scroll_core.models.policy import PolicyModel
from scroll_core.prompts import RECALL_TOOL, REPL_TOOL
from scroll_core.qualify import ITEMS, Scorecard, run_suite, upstream_model

KERNEL = KernelConfig(sandbox="process", grace_s=0.5)


def qualify(name: str, tmp_path, seen: list | None = None) -> Scorecard:
    """A fresh run (these tests check what the endpoint received too)."""
    behaviour = make(name)
    if seen is not None:
        seen.append(behaviour)
    upstream = ScriptedUpstream(default=behaviour)
    try:
        model = upstream_model(upstream.url, f"scripted-{name}")
        card = run_suite(model, tmp_path, kernel_config=KERNEL, upstream=upstream.url)
        model.close()
    finally:
        upstream.close()
    assert behaviour.calls > 0  # every call went over HTTP to the scripted endpoint
    return card


def failed(card: Scorecard) -> set[str]:
    return {i.id for i in card.items if not i.passed}


def test_a_competent_model_passes_every_item(tmp_path):
    seen: list = []
    card = qualify("competent", tmp_path, seen)
    assert failed(card) == set(), dump(card)
    assert card.passed and card.total == 100.0
    assert all(i.lint == () for i in card.items)
    assert all(
        i.cells >= 1 and i.tokens > 0
        for i in card.items
        if "." in i.id
        and i.id not in ("protocol.call_shape", "protocol.headlines", "protocol.window")
    )
    assert card.item("acting.two_steps").cells == 2  # it finished the second step
    # Scroll's own loop offers both cells; the gateway's, to a client with no tools of its
    # own, no tool before its first eviction and the recall cell alone after it.
    assert frozenset({REPL_TOOL, RECALL_TOOL}) in seen[0].tools_seen
    assert seen[0].tools_seen <= {
        frozenset({REPL_TOOL, RECALL_TOOL}),
        frozenset({RECALL_TOOL}),
        frozenset(),
    }


def test_a_model_that_prints_whole_tables_fails_acting(tmp_path):
    card = qualify("table_printer", tmp_path)
    acting = {i.id for i in ITEMS if i.category == "acting"}
    assert acting <= failed(card), dump(card)
    assert (
        "print" in card.item("acting.bind_filter").detail
        or "re-ran" in card.item("acting.bind_filter").detail
    )
    assert card.category("acting").score == 0.0
    # It printed the table again when the cap cut it: the trajectory lint says so.
    assert "window_refill" in card.item("acting.bind_filter").lint
    assert card.category("protocol").ok  # it speaks the protocol; it just does not act
    assert not card.passed


def test_a_model_that_stops_after_one_search_fails_acting_and_recall(tmp_path):
    card = qualify("one_search", tmp_path)
    assert card.category("acting").passed == 0, dump(card)
    assert card.category("recall").passed == 0, dump(card)
    assert card.item("protocol.call_shape").passed and card.item("protocol.headlines").passed
    assert not card.passed


def test_a_model_that_answers_the_archive_fails_the_seam(tmp_path):
    card = qualify("archive_answerer", tmp_path)
    assert failed(card) == {"protocol.seam"}, dump(card)
    assert "archived index" in card.item("protocol.seam").detail
    assert not card.passed  # protocol is all or nothing


def test_a_model_that_breaks_the_call_protocol_fails_protocol(tmp_path):
    card = qualify("protocol_breaker", tmp_path)
    assert {"protocol.call_shape", "protocol.headlines"} <= failed(card), dump(card)
    assert "'python'" in card.item("protocol.call_shape").detail
    assert card.category("acting").passed == 0  # nothing it asked for ever ran
    assert not card.passed


def test_the_rule_based_baseline_gets_a_scorecard_and_it_round_trips(tmp_path):
    card = run_suite(PolicyModel(), tmp_path, kernel_config=KERNEL)
    assert [i.id for i in card.items][: len(ITEMS)] == [i.id for i in ITEMS]
    assert len(card.items) == len(ITEMS) + 3
    # It writes recall programs, not task code: it cannot act, and says so in its scorecard.
    assert card.category("acting").passed == 0, dump(card)
    assert card.item("protocol.headlines").passed
    again = Scorecard.from_dict(card.to_dict())
    assert again.to_dict() == card.to_dict()


def test_the_suite_is_the_same_for_the_same_seed(tmp_path):
    first = [item.build(__import__("random").Random(f"1:33:{item.id}")).prompt for item in ITEMS]
    second = [item.build(__import__("random").Random(f"1:33:{item.id}")).prompt for item in ITEMS]
    assert first == second


def test_a_bad_upstream_is_refused_with_a_clear_error():
    with pytest.raises(ConfigError, match="http"):
        upstream_model("ftp://example", "m")
    with pytest.raises(ConfigError, match="api"):
        upstream_model("http://127.0.0.1:1/v1", "m", api="grpc")
