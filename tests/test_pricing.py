"""One call's cost (scroll_core.pricing): genai-prices' default prices read from its bundled
data, each part of the prompt at its own price, the caller's rates winning, and no cost for a
model nobody prices. Expected figures come from genai-prices' own table, not from ours."""

from __future__ import annotations

import socket
from datetime import UTC, datetime
from decimal import Decimal

import genai_prices
import pytest
from genai_prices import data_snapshot
from genai_prices.data import providers

from scroll_core.models import Usage
from scroll_core.pricing import DEFAULT_SOURCE, Cost, Rates, default_cost, price_call

MILLION = Decimal(1_000_000)


def _published(model: str):
    """genai-prices' own price of ``model`` today (its ModelPrice: ``input_mtok``, ...)."""
    bundled = data_snapshot.DataSnapshot(providers=providers, from_auto_update=False)
    _, info = bundled.find_provider_model(model, None, None, None)
    return info.get_prices(datetime.now(UTC))


def test_a_model_genai_prices_knows_gets_its_default_cost_and_says_so():
    published = _published("gpt-4o")
    cost = price_call(Usage(input_tokens=5000, output_tokens=400), "gpt-4o-2024-08-06")
    want = (5000 * published.input_mtok + 400 * published.output_mtok) / MILLION
    assert cost == Cost(want, "USD", DEFAULT_SOURCE)
    assert DEFAULT_SOURCE.split() == ["genai-prices", genai_prices.__version__]


def test_cache_reads_are_priced_at_the_cache_price_not_the_input_price():
    published = _published("gpt-4o")
    assert published.cache_read_mtok < published.input_mtok
    used = Usage(input_tokens=5000, output_tokens=400, cache_read_input_tokens=4000)
    cost = price_call(used, "gpt-4o", "openai")
    want = (
        1000 * published.input_mtok + 4000 * published.cache_read_mtok + 400 * published.output_mtok
    ) / MILLION
    assert cost is not None and cost.amount == want
    assert cost.amount < price_call(Usage(5000, 400), "gpt-4o", "openai").amount


def test_anthropic_cache_writes_cost_their_own_price():
    published = _published("claude-haiku-4-5")
    assert published.cache_write_mtok > published.input_mtok
    used = Usage(input_tokens=10_000, output_tokens=500, cache_read_input_tokens=6000,
                 cache_creation_input_tokens=3000)  # fmt: skip
    cost = price_call(used, "claude-haiku-4-5-20251001", "anthropic")
    want = (
        1000 * published.input_mtok
        + 6000 * published.cache_read_mtok
        + 3000 * published.cache_write_mtok
        + 500 * published.output_mtok
    ) / MILLION
    assert cost is not None and cost.amount == want


def test_a_model_or_provider_nobody_prices_has_no_cost():
    used = Usage(1000, 100)
    assert price_call(used, "scroll-policy-baseline") is None
    assert price_call(used, "llama3.1:8b") is None
    assert price_call(used, "gpt-4o", "my-own-vllm") is None
    assert price_call(used, "") is None


def test_the_callers_rates_win_over_the_default_price():
    rates = Rates(Decimal("2"), Decimal("0.5"), Decimal("8"), Decimal("3"), "EUR", "admin")
    used = Usage(input_tokens=1000, output_tokens=100, cache_read_input_tokens=600,
                 cache_creation_input_tokens=200)  # fmt: skip
    cost = price_call(used, "gpt-4o", rates=rates)
    want = (200 * 2 + 600 * Decimal("0.5") + 200 * 3 + 100 * 8) / MILLION
    assert cost == Cost(want, "EUR", "admin")
    assert price_call(used, "scroll-policy-baseline", rates=rates) == cost  # known or not


def test_rates_without_a_cache_write_price_charge_writes_at_the_input_price():
    rates = Rates(Decimal("2"), Decimal("0.5"), Decimal("8"))
    written = rates.cost(Usage(1000, 0, cache_creation_input_tokens=1000))
    assert written.amount == rates.cost(Usage(1000, 0)).amount == Decimal("0.002")


def test_a_call_is_priced_at_the_price_in_force_when_it_was_made():
    # genai-prices dates its prices: claude-sonnet-4-6's long prompts cost double until
    # 2026-03-13, the same as short ones since.
    used = Usage(300_000, 1000)
    before = default_cost(used, "claude-sonnet-4-6", at=datetime(2026, 3, 1, tzinfo=UTC))
    since = default_cost(used, "claude-sonnet-4-6", at=datetime(2026, 4, 1, tzinfo=UTC))
    assert before is not None and since is not None
    assert since.amount == (300_000 * 3 + 1000 * 15) / MILLION
    assert before.amount == (300_000 * 6 + Decimal("22.5") * 1000) / MILLION


def test_prices_come_from_the_bundled_data_with_no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("pricing tried to reach the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    # What genai_prices.UpdatePrices would install after a download: never read here.
    data_snapshot.set_custom_snapshot(
        data_snapshot.DataSnapshot(providers=[], from_auto_update=True)
    )
    try:
        cost = default_cost(Usage(1000, 100), "claude-sonnet-4-5")
    finally:
        data_snapshot.set_custom_snapshot(None)
    assert cost is not None and cost.source == DEFAULT_SOURCE


@pytest.mark.parametrize("model", ["gpt-4o", "claude-sonnet-4-5", "gpt-4.1-mini"])
def test_genai_prices_agrees_with_its_own_calculator(model):
    used = Usage(20_000, 1000, cache_read_input_tokens=15_000, cache_creation_input_tokens=2000)
    counts = genai_prices.Usage(
        input_tokens=20_000, output_tokens=1000, cache_read_tokens=15_000, cache_write_tokens=2000
    )
    theirs = genai_prices.calc_price(counts, model)
    cost = default_cost(used, model)
    assert cost is not None and cost.amount == theirs.total_price
