"""Every knob of context management in one validated, immutable profile.

The defaults are the reference implementation's constants (DESIGN.md, "Eviction"): trigger at
0.8 of the window, a protected tail of ``min(cap, max(reserve_ratio*C, min(10000, 0.1*C)))``
tokens, the five newest tool results protected, results of 200 characters or fewer never
pre-folded, tiers of 10, a 32,000-character print cap and an output reserve of
``min(4096, max(1, 0.05*C))`` tokens. ``trigger_cap_tokens`` (none by default) caps the
trigger in tokens. Behind a provider's prompt cache a large view costs more to read on every
call than an eviction costs to rewrite: past a 40k window a tail capped at 4,096 tokens and
a trigger at 98,304 made a long gateway session 0.90x the agent's own compaction at 128k,
against 1.02x with these defaults (``bench/gateway_cost.py``, chosen on its dev sessions).
They are the seeded ``long-window-cache`` console profile (``CACHED_LONG_WINDOW``), not the
defaults, which stay the reference's.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from .errors import ConfigError

__all__ = ["CACHED_LONG_WINDOW", "Profile"]

# Below this the fixed prefix alone would not fit; it catches a context size given in
# thousands ("128") instead of tokens.
MIN_CONTEXT_SIZE = 256

# Upper bounds, so that a profile saved by mistake or by a hostile form cannot make the host
# hold a cell for a day or a printout of gigabytes. Each is far above any sane setting:
# - context_size, token caps: 10M tokens, several times the largest window offered today;
# - print_cap: 1M characters (~250k tokens) is already more than a view should ever take;
# - exec_timeout_s: 10 minutes per cell; a longer cell holds its kernel (and its lock) for
#   that long, and work of that size belongs outside a cell;
# - protected_recent_tool_results: 1,000; the view keeps that many results whole, a few
#   dozen is already generous;
# - tier_cap: 2**31 - 1, a tier that never fills (a flat index: the replay lab's "flat"
#   policy); the index's share of the view is capped by index_budget_ratio either way;
# - pre_trim_min_chars: 1M characters, the print cap's bound (nothing longer comes back).
MAX_CONTEXT_SIZE = 10_000_000
UPPER_BOUNDS: dict[str, int] = {
    "context_size": MAX_CONTEXT_SIZE,
    "trigger_cap_tokens": MAX_CONTEXT_SIZE,
    "tail_cap_tokens": MAX_CONTEXT_SIZE,
    "tail_floor_tokens": MAX_CONTEXT_SIZE,
    "output_reserve_cap": MAX_CONTEXT_SIZE,
    "print_cap": 1_000_000,
    "pre_trim_min_chars": 1_000_000,
    "protected_recent_tool_results": 1_000,
    "tier_cap": 2**31 - 1,
    "exec_timeout_s": 600,
}


@dataclass(frozen=True)
class Profile:
    """Context-management settings for one session; the console edits these.

    ``replace`` and ``from_mapping`` validate exactly like the constructor, so a profile that
    exists is a profile that works.
    """

    context_size: int = 128_000
    trigger_ratio: float = 0.8
    trigger_cap_tokens: int = MAX_CONTEXT_SIZE
    reserve_ratio: float = 0.1
    tail_cap_tokens: int = 40_000
    tail_floor_tokens: int = 10_000
    tail_floor_ratio: float = 0.1
    protected_recent_tool_results: int = 5
    pre_trim_min_chars: int = 200
    tier_cap: int = 10
    print_cap: int = 32_000
    index_budget_ratio: float = 0.05
    output_reserve_cap: int = 4096
    output_reserve_ratio: float = 0.05
    exec_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            want_int = f.type in ("int", int)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ConfigError(f"{f.name} must be a number, got {value!r}")
            if want_int and not isinstance(value, int):
                raise ConfigError(f"{f.name} must be an integer, got {value!r}")
            if not math.isfinite(value):
                raise ConfigError(f"{f.name} must be finite, got {value!r}")
        for name, bound in UPPER_BOUNDS.items():
            if getattr(self, name) > bound:
                raise ConfigError(f"{name} must be at most {bound:,}, got {getattr(self, name)}")
        if self.context_size < MIN_CONTEXT_SIZE:
            raise ConfigError(
                f"context_size must be at least {MIN_CONTEXT_SIZE} tokens, got {self.context_size}"
            )
        _ratio("trigger_ratio", self.trigger_ratio, allow_one=True)
        _ratio("reserve_ratio", self.reserve_ratio)
        _ratio("tail_floor_ratio", self.tail_floor_ratio)
        _ratio("index_budget_ratio", self.index_budget_ratio)
        _ratio("output_reserve_ratio", self.output_reserve_ratio)
        if self.trigger_cap_tokens < 1:
            raise ConfigError(f"trigger_cap_tokens must be positive, got {self.trigger_cap_tokens}")
        for name in (
            "tail_cap_tokens",
            "tail_floor_tokens",
            "protected_recent_tool_results",
            "pre_trim_min_chars",
        ):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must not be negative, got {getattr(self, name)}")
        if self.tier_cap < 2:
            raise ConfigError(f"tier_cap must be at least 2, got {self.tier_cap}")
        if self.print_cap < 1:
            raise ConfigError(f"print_cap must be positive, got {self.print_cap}")
        if self.output_reserve_cap < 1:
            raise ConfigError(f"output_reserve_cap must be positive, got {self.output_reserve_cap}")
        if self.exec_timeout_s <= 0:
            raise ConfigError(f"exec_timeout_s must be positive, got {self.exec_timeout_s}")
        if self.tail_tokens >= self.trigger_tokens:
            raise ConfigError(
                f"the protected tail ({self.tail_tokens} tokens from reserve_ratio, "
                f"tail_cap_tokens and tail_floor_tokens) must be smaller than the trigger "
                f"({self.trigger_tokens} tokens from trigger_ratio {self.trigger_ratio} of "
                f"context_size {self.context_size} and trigger_cap_tokens "
                f"{self.trigger_cap_tokens}), or eviction could never get under it"
            )

    # ------------------------------------------------------------------ derived
    @property
    def output_reserve(self) -> int:
        """Tokens kept free for the model's answer: ``min(4096, max(1, 0.05*C))``."""
        share = int(self.output_reserve_ratio * self.context_size)
        return min(self.output_reserve_cap, max(1, share))

    @property
    def hard_limit(self) -> int:
        """The largest view that still leaves the output reserve free."""
        return self.context_size - self.output_reserve

    @property
    def trigger_tokens(self) -> int:
        """Compress when the view is above this: ``trigger_ratio`` of C, at most
        ``trigger_cap_tokens``, never above the hard limit."""
        share = int(self.trigger_ratio * self.context_size)
        return min(share, self.trigger_cap_tokens, self.hard_limit)

    @property
    def tail_tokens(self) -> int:
        """The protected tail: ``min(cap, max(reserve_ratio*C, min(floor, 0.1*C)))``."""
        c = self.context_size
        floor = min(self.tail_floor_tokens, self.tail_floor_ratio * c)
        return int(min(self.tail_cap_tokens, max(self.reserve_ratio * c, floor)))

    @property
    def index_budget_tokens(self) -> int:
        """The eviction index's detail budget in the view."""
        return max(1, int(self.index_budget_ratio * self.context_size))

    # --------------------------------------------------------------- conversion
    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> Profile:
        """Build a profile from settings, JSON or a form: unknown keys are refused, numbers
        given as strings are converted, and every error names its field."""
        if not isinstance(data, Mapping):
            raise ConfigError(f"a profile must be a mapping, not {type(data).__name__}")
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise ConfigError(f"unknown profile setting(s): {', '.join(map(str, unknown))}")
        values = {
            name: _coerce(name, value, known[name].type in ("int", int))
            for name, value in data.items()
        }
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def derived(self) -> dict[str, int]:
        """The numbers the settings imply, for display next to them."""
        return {
            "trigger_tokens": self.trigger_tokens,
            "hard_limit": self.hard_limit,
            "tail_tokens": self.tail_tokens,
            "output_reserve": self.output_reserve,
            "index_budget_tokens": self.index_budget_tokens,
        }

    def replace(self, **changes: Any) -> Profile:
        """A copy with ``changes`` applied and validated (unknown names are refused)."""
        known = {f.name for f in fields(self)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise ConfigError(f"unknown profile setting(s): {', '.join(unknown)}")
        return dataclasses.replace(self, **changes)


def _ratio(name: str, value: float, *, allow_one: bool = False) -> None:
    upper_ok = value <= 1 if allow_one else value < 1
    if not (value > 0 and upper_ok):
        interval = "(0, 1]" if allow_one else "(0, 1)"
        raise ConfigError(f"{name} must be in {interval}, got {value}")


def _coerce(name: str, value: Any, want_int: bool) -> Any:
    if isinstance(value, str):
        text = value.strip()
        try:
            number = float(text)
        except ValueError:
            raise ConfigError(f"{name} must be a number, got {value!r}") from None
        value = number
    if want_int and isinstance(value, float) and not isinstance(value, bool):
        if not value.is_integer():
            raise ConfigError(f"{name} must be an integer, got {value!r}")
        value = int(value)
    if not want_int and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    return value


# The knobs of the seeded ``long-window-cache`` profile (see the module's docstring): cheaper
# than the reference's behind a prompt cache at windows past 40k; the same at or below.
CACHED_LONG_WINDOW: dict[str, int] = {"tail_cap_tokens": 4_096, "trigger_cap_tokens": 98_304}
