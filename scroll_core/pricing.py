"""What one model call costs, from its ``Usage``: the prompt tokens the provider's cache
neither read nor wrote at the input price, cache reads at the cache-read price, cache writes at
the cache-write price, and the output at the output price.

Prices come from one of two places: ``Rates`` the caller has (an operator's, per million
tokens, flat) or, without them, the default prices of the ``genai-prices`` package, a
maintained table of providers' published prices (tiers by prompt size and dated price changes
included). Its data ships in the wheel and is read from there alone: the package can fetch
newer prices in the background (``genai_prices.UpdatePrices``), and this module neither starts
that nor reads what it fetched, so a cost never depends on the network and says which release
of the data priced it (``DEFAULT_SOURCE``).

    cost = price_call(reply.usage, "gpt-4o")       # Cost(amount, "USD", "genai-prices 0.2.3")
    cost = price_call(usage, model, rates=rates)   # the caller's Rates win
    price_call(usage, "my-local-model")            # None: no price known
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from importlib.metadata import version
from typing import TYPE_CHECKING, Any

from .models.base import Usage

if TYPE_CHECKING:
    from genai_prices.data_snapshot import DataSnapshot

__all__ = ["DEFAULT_SOURCE", "Cost", "Rates", "default_cost", "price_call"]

MILLION = Decimal(1_000_000)
DEFAULT_SOURCE = f"genai-prices {version('genai-prices')}"


@dataclass(frozen=True)
class Cost:
    """What a call cost: ``amount`` in ``currency``, priced by ``source`` (``"genai-prices
    0.2.3"``, or the ``Rates.source`` of the rates that priced it)."""

    amount: Decimal
    currency: str
    source: str


@dataclass(frozen=True)
class Rates:
    """Flat prices per million tokens. ``cache_write_per_mtok`` ``None``: cache writes cost
    the input price (what a provider that bills no writes, such as OpenAI, charges)."""

    input_per_mtok: Decimal
    cache_read_per_mtok: Decimal
    output_per_mtok: Decimal
    cache_write_per_mtok: Decimal | None = None
    currency: str = "USD"
    source: str = ""

    def cost(self, usage: Usage) -> Cost:
        """``usage`` at these rates (cache counts the provider did not report count as 0)."""
        written = self.input_per_mtok if self.cache_write_per_mtok is None else (
            self.cache_write_per_mtok
        )  # fmt: skip
        amount = (
            Decimal(usage.uncached_input_tokens) * self.input_per_mtok
            + Decimal(usage.cache_read_input_tokens or 0) * self.cache_read_per_mtok
            + Decimal(usage.cache_creation_input_tokens or 0) * written
            + Decimal(usage.output_tokens) * self.output_per_mtok
        ) / MILLION
        return Cost(amount, self.currency, self.source)


def price_call(
    usage: Usage,
    model: str,
    provider: str | None = None,
    *,
    rates: Rates | None = None,
    at: datetime | None = None,
) -> Cost | None:
    """One call's cost: at ``rates`` when given, else at ``default_cost``'s; ``None`` when
    neither knows ``model``."""
    if rates is not None:
        return rates.cost(usage)
    return default_cost(usage, model, provider, at=at)


def default_cost(
    usage: Usage, model: str, provider: str | None = None, *, at: datetime | None = None
) -> Cost | None:
    """``usage`` at the published price of ``model`` (as the provider reported it, e.g.
    ``gpt-4o-2024-08-06``) from genai-prices' bundled data, in USD. ``provider`` is a
    genai-prices provider id (``openai``, ``anthropic``, ...); without it the provider whose
    models the name matches. ``at`` (timezone-aware) picks the price in force then (default:
    now). ``None`` when the data has no such provider or model (a local model, a name of the
    operator's)."""
    if not model:
        return None
    try:
        found = _snapshot().calc(_genai_usage(usage), model, provider, None, at)
    except LookupError:
        return None
    return Cost(found.total_price, "USD", DEFAULT_SOURCE)


@functools.cache
def _snapshot() -> DataSnapshot:
    # Imported on first use: the price table is a large module most processes never need.
    from genai_prices.data import providers
    from genai_prices.data_snapshot import DataSnapshot

    # The bundled data, never genai_prices.calc_price's "current" snapshot, which an
    # UpdatePrices started anywhere in the process would replace with one it downloaded.
    return DataSnapshot(providers=providers, from_auto_update=False)


def _genai_usage(usage: Usage) -> Any:
    from genai_prices import Usage as GenaiUsage

    # The same convention as ours: input_tokens counts the cache reads and writes within it
    # (never fewer than they are: genai-prices refuses a negative remainder).
    cached = (usage.cache_read_input_tokens or 0) + (usage.cache_creation_input_tokens or 0)
    counts: dict[str, int] = {
        "input_tokens": max(usage.input_tokens, cached),
        "output_tokens": usage.output_tokens,
    }
    if usage.cache_read_input_tokens is not None:
        counts["cache_read_tokens"] = usage.cache_read_input_tokens
    if usage.cache_creation_input_tokens is not None:
        counts["cache_write_tokens"] = usage.cache_creation_input_tokens
    return GenaiUsage(**counts)
