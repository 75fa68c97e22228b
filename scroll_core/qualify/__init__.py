"""Qualification: a fixed, versioned suite that runs a model through Scroll's own loop and
scores it (issue 33). ``run_suite`` gives a ``Scorecard``; ``upstream_model`` reaches a
model at an OpenAI- or Anthropic-compatible URL."""

from __future__ import annotations

from .endpoint import APIS, UpstreamModel, upstream_model
from .items import ITEMS, Item
from .runner import SUITE_SEED, SUITE_VERSION, run_suite
from .scorecard import CATEGORIES, PASS_MARKS, CategoryScore, ItemResult, Scorecard

__all__ = [
    "APIS",
    "CATEGORIES",
    "ITEMS",
    "PASS_MARKS",
    "SUITE_SEED",
    "SUITE_VERSION",
    "CategoryScore",
    "Item",
    "ItemResult",
    "Scorecard",
    "UpstreamModel",
    "run_suite",
    "upstream_model",
]
