"""Trajectory lint (issue 33): rules over a recorded session's cells that flag the ways an
agent fails while its programs run without error. Each flag names the cell, the seqs that
show the failure and a plain explanation."""

from __future__ import annotations

from .rules import (
    LOG_RULES,
    RULE_NAMES,
    RULES,
    Flag,
    head_and_tail,
    lint_session,
    re_reading,
    window_refill,
)
from .trajectory import RecordedCell, recorded_cells

__all__ = [
    "LOG_RULES",
    "RULES",
    "RULE_NAMES",
    "Flag",
    "RecordedCell",
    "head_and_tail",
    "lint_session",
    "re_reading",
    "recorded_cells",
    "window_refill",
]
