"""Trajectory lint (issue 33): rules over a recorded session's cells and turns that flag the
ways an agent fails while its programs run without error. Each flag names the cell (or the
reply), the seqs that show the failure and a plain explanation."""

from __future__ import annotations

from .answers import archive_answered, no_disconfirming_query
from .filters import undercounting_filter
from .flag import Flag
from .rules import (
    LOG_RULES,
    RULE_NAMES,
    RULES,
    TURN_RULES,
    head_and_tail,
    lint_session,
    re_reading,
    window_refill,
)
from .trajectory import RecordedCell, RecordedTurn, recorded_cells, recorded_turns

__all__ = [
    "LOG_RULES",
    "RULES",
    "RULE_NAMES",
    "TURN_RULES",
    "Flag",
    "RecordedCell",
    "RecordedTurn",
    "archive_answered",
    "head_and_tail",
    "lint_session",
    "no_disconfirming_query",
    "re_reading",
    "recorded_cells",
    "recorded_turns",
    "undercounting_filter",
    "window_refill",
]
