"""The profile: defaults from the reference, derived numbers, validation naming the field."""

from __future__ import annotations

import pytest

from scroll_core.errors import ConfigError
from scroll_core.profile import CACHED_LONG_WINDOW, MAX_CONTEXT_SIZE, UPPER_BOUNDS, Profile


def test_defaults_are_the_reference_constants():
    p = Profile(context_size=128_000)
    assert p.trigger_tokens == 102_400
    assert p.tail_tokens == 12_800
    assert p.output_reserve == 4096
    assert p.hard_limit == 128_000 - 4096
    assert (p.protected_recent_tool_results, p.pre_trim_min_chars, p.tier_cap) == (5, 200, 10)
    assert p.print_cap == 32_000


@pytest.mark.parametrize(
    ("context_size", "tail", "reserve"),
    [
        (1_000_000, 40_000, 4096),  # capped at 40000
        (200_000, 20_000, 4096),  # reserve_ratio * C
        (8_000, 800, 400),  # 0.1 * C below the 10000 floor
        (2_000, 200, 100),
    ],
)
def test_tail_and_output_reserve_follow_the_formulas(context_size, tail, reserve):
    p = Profile(context_size=context_size)
    assert p.tail_tokens == tail
    assert p.output_reserve == reserve


def test_the_floor_applies_when_reserve_ratio_is_small():
    p = Profile(context_size=200_000, reserve_ratio=0.01)
    assert p.tail_tokens == 10_000


def test_the_defaults_are_the_references_and_the_cached_profile_caps_large_windows():
    # The reference's 0.8 * C and 0.1 * C with no trigger cap: at 128k, 104,857 and 13,107.
    p = Profile(context_size=131_072)
    assert (p.trigger_tokens, p.tail_tokens) == (104_857, 13_107)
    # The long-window-cache knobs evict at 98,304 tokens down to a 4,096-token tail ...
    q = p.replace(**CACHED_LONG_WINDOW)
    assert (q.trigger_tokens, q.tail_tokens) == (98_304, 4_096)
    # ... and change nothing at a 32k window.
    r = Profile(context_size=32_768)
    assert (
        r.replace(**CACHED_LONG_WINDOW).trigger_tokens,
        r.replace(**CACHED_LONG_WINDOW).tail_tokens,
    ) == (
        r.trigger_tokens,
        r.tail_tokens,
    )
    with pytest.raises(ConfigError, match="trigger_cap_tokens must be positive"):
        q.replace(trigger_cap_tokens=0)
    with pytest.raises(ConfigError, match="trigger_cap_tokens 3000"):
        q.replace(trigger_cap_tokens=3_000)  # under the tail: eviction could never get under it


def test_a_trigger_of_one_is_clamped_to_the_hard_limit():
    p = Profile(context_size=10_000, trigger_ratio=1.0)
    assert p.trigger_tokens == p.hard_limit == 9_500


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"trigger_ratio": 0}, "trigger_ratio"),
        ({"trigger_ratio": 1.2}, "trigger_ratio"),
        ({"reserve_ratio": 1.0}, "reserve_ratio"),
        ({"tail_cap_tokens": -1}, "tail_cap_tokens"),
        ({"pre_trim_min_chars": -5}, "pre_trim_min_chars"),
        ({"protected_recent_tool_results": -1}, "protected_recent_tool_results"),
        ({"tier_cap": 1}, "tier_cap"),
        ({"print_cap": 0}, "print_cap"),
        ({"context_size": 100}, "context_size"),
        ({"context_size": 1000.5}, "context_size"),
        ({"exec_timeout_s": 0}, "exec_timeout_s"),
        ({"index_budget_ratio": 0}, "index_budget_ratio"),
        ({"tier_cap": True}, "tier_cap"),
        ({"trigger_ratio": float("nan")}, "trigger_ratio"),
        ({"trigger_ratio": 0.1, "reserve_ratio": 0.5, "tail_cap_tokens": 40_000}, "trigger"),
    ],
)
def test_bad_values_are_refused_naming_the_field(changes, field):
    with pytest.raises(ConfigError, match=field):
        Profile(**changes)
    with pytest.raises(ConfigError, match=field):
        Profile().replace(**changes)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        # The values an attacker saved from the replay lab before there were upper bounds.
        ("exec_timeout_s", 86_400_000),
        ("print_cap", 2_000_000_000),
        ("context_size", 100_000_000),
        ("tail_cap_tokens", 10_000_001),
        ("tail_floor_tokens", 10_000_001),
        ("output_reserve_cap", 10_000_001),
        ("pre_trim_min_chars", 1_000_001),
        ("protected_recent_tool_results", 1_001),
        ("tier_cap", 2**31),
        ("exec_timeout_s", 600.5),
    ],
)
def test_knobs_above_their_upper_bound_are_refused_naming_the_field_and_bound(field, value):
    bound = f"{UPPER_BOUNDS[field]:,}"
    with pytest.raises(ConfigError, match=rf"^{field} must be at most {bound}, got"):
        Profile(**{field: value})
    with pytest.raises(ConfigError, match=rf"^{field} must be at most {bound}"):
        Profile.from_mapping({field: str(value)})


def test_every_knob_at_its_upper_bound_is_accepted():
    at_bounds = Profile(
        **{name: bound for name, bound in UPPER_BOUNDS.items() if name != "exec_timeout_s"},
        exec_timeout_s=float(UPPER_BOUNDS["exec_timeout_s"]),
    )
    assert at_bounds.context_size == MAX_CONTEXT_SIZE
    assert at_bounds.print_cap == 1_000_000 and at_bounds.exec_timeout_s == 600.0


def test_from_mapping_converts_strings_and_refuses_unknown_keys():
    p = Profile.from_mapping({"context_size": "32000", "trigger_ratio": "0.75", "tier_cap": 8.0})
    assert (p.context_size, p.trigger_ratio, p.tier_cap) == (32_000, 0.75, 8)
    with pytest.raises(ConfigError, match="trigger_ration"):
        Profile.from_mapping({"trigger_ration": 0.8})
    with pytest.raises(ConfigError, match="tier_cap"):
        Profile.from_mapping({"tier_cap": "ten"})
    with pytest.raises(ConfigError, match="tier_cap"):
        Profile.from_mapping({"tier_cap": 2.5})


def test_to_dict_round_trips_and_replace_validates():
    p = Profile(context_size=64_000, trigger_ratio=0.7)
    assert Profile.from_mapping(p.to_dict()) == p
    q = p.replace(tier_cap=4)
    assert q.tier_cap == 4 and p.tier_cap == 10
    with pytest.raises(ConfigError, match="unknown"):
        p.replace(colour="blue")
    assert p.derived()["trigger_tokens"] == 44_800
