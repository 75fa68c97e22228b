"""The tiered eviction index: carry rule, gap-free coverage, render budgets, checkpoints."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scroll_core.errors import EvictionIndexError
from scroll_core.headlines import NO_MILESTONE
from scroll_core.index import INDEX_HEADER, SEAM_BANNER, EvictionIndex
from scroll_core.tokens import CharRatioCounter

COUNTER = CharRatioCounter()


def filled(n: int, *, width: int = 1, tier_cap: int = 10) -> EvictionIndex:
    index = EvictionIndex(tier_cap=tier_cap)
    for i in range(n):
        index.add_eviction(i * width + 1, i * width + width, [f"step {i}: did thing {i}"])
    return index


@given(
    spans=st.lists(st.tuples(st.integers(0, 5), st.integers(1, 6)), min_size=1, max_size=400),
    tier_cap=st.integers(2, 12),
)
@settings(max_examples=150, deadline=None)
def test_blocks_always_tile_the_evicted_range_with_no_gap(spans, tier_cap):
    index = EvictionIndex(tier_cap=tier_cap)
    next_lo = 1
    first = None
    for skip, width in spans:
        lo = next_lo + skip  # other sessions' seqs may sit between two evictions
        hi = lo + width - 1
        index.add_eviction(lo, hi, ["h"])
        first = lo if first is None else first
        next_lo = hi + 1
        index.check()
        ranges = index.coverage()
        assert ranges[0][0] == first and ranges[-1][1] == hi
        assert all(b[0] == a[1] + 1 for a, b in itertools.pairwise(ranges))
        assert all(len(tier) <= tier_cap - 1 for tier in index.tiers)
    assert sum(b.evictions for b in index.blocks) == len(spans)


@pytest.mark.parametrize(("n", "blocks"), [(100, 4), (1_000, 8), (10_000, 16), (100_000, 16)])
def test_block_counts_match_the_seed(n, blocks):
    index = filled(n)
    index.check()
    assert len(index) == blocks


def test_tier_profile_at_ten_thousand_is_pascals_row():
    assert filled(10_000).tier_profile() == [1, 4, 6, 4, 1]


def test_a_full_tier_keeps_its_newest_block_and_carries_the_rest():
    index = filled(10)
    assert index.tier_profile() == [1, 1]
    (top,) = index.tiers[1]
    (newest,) = index.tiers[0]
    assert (top.lo_seq, top.hi_seq, top.evictions) == (1, 9, 9)
    assert (newest.lo_seq, newest.hi_seq) == (10, 10)
    assert len(top.headlines) == 9


def test_folded_blocks_keep_a_bounded_number_of_headlines():
    index = filled(100_000)
    assert all(len(b.headlines) <= 9 for b in index.blocks)
    assert index.blocks[-1].headlines == ("step 99999: did thing 99999",)


def test_a_span_without_headlines_shows_no_milestone():
    index = EvictionIndex()
    block = index.add_eviction(1, 5, [None, "  "])
    assert block.headlines == (NO_MILESTONE,)
    assert index.add_eviction(6, 6).headlines == (NO_MILESTONE,)


def test_it_refuses_spans_out_of_order_or_empty_and_changes_nothing():
    index = filled(3)
    before = index.to_checkpoint()
    with pytest.raises(EvictionIndexError, match="overlaps"):
        index.add_eviction(3, 9)
    with pytest.raises(EvictionIndexError, match="empty"):
        index.add_eviction(9, 8)
    assert index.to_checkpoint() == before


def test_a_span_after_foreign_seqs_starts_right_after_the_previous_block():
    index = EvictionIndex()
    index.add_eviction(10, 20)
    block = index.add_eviction(31, 40)
    assert (block.lo_seq, block.hi_seq) == (21, 40)
    index.check()


def test_block_for_names_the_block_an_expand_hit():
    index = filled(1_000, width=3)
    for seq in (1, 2, 1500, 2997, 2998, 3000):
        block = index.block_for(seq)
        assert block is not None and block.contains(seq)
    assert index.block_for(0) is None
    assert index.block_for(3001) is None
    assert EvictionIndex().block_for(1) is None


def test_checkpoint_round_trips_through_json():
    index = filled(1_234, width=2)
    restored = EvictionIndex.from_checkpoint(json.loads(json.dumps(index.to_checkpoint())))
    assert restored.tiers == index.tiers
    assert restored.tier_cap == index.tier_cap
    restored.add_eviction(2_469, 2_470, ["next"])
    index.add_eviction(2_469, 2_470, ["next"])
    assert restored.tiers == index.tiers


def test_a_checkpoint_with_a_gap_is_refused():
    data = filled(20).to_checkpoint()
    data["tiers"][1][-1]["lo_seq"] += 1
    with pytest.raises(EvictionIndexError, match="gap"):
        EvictionIndex.from_checkpoint(data)
    with pytest.raises(EvictionIndexError, match="malformed"):
        EvictionIndex.from_checkpoint({"version": 1, "tier_cap": 10})
    with pytest.raises(EvictionIndexError, match="version"):
        EvictionIndex.from_checkpoint({"version": 99})


def test_tier_cap_below_two_is_refused():
    with pytest.raises(EvictionIndexError, match="tier_cap"):
        EvictionIndex(tier_cap=1)


def test_render_shows_highest_tier_first_then_the_constant_banner():
    index = filled(25)
    rendered = index.render(10_000, COUNTER)
    assert rendered.level == "full"
    text = rendered.text
    assert text.startswith(INDEX_HEADER)
    assert text.endswith(SEAM_BANNER)
    assert text.index("[tier 1] seq 1-9") < text.index("[tier 0] seq 19-") < text.index("seq 25-25")
    assert "step 24: did thing 24" in text
    assert rendered.tokens == COUNTER.count(text)


def test_render_degrades_under_budget_pressure():
    index = filled(5_000, width=4)
    full = index.render(100_000, COUNTER)
    levels = []
    for budget in (full.tokens, full.tokens - 1, 300, 120, 1):
        rendered = index.render(budget, COUNTER)
        levels.append(rendered.level)
        if rendered.level != "pointer":
            assert rendered.tokens <= budget
        assert rendered.text.endswith(SEAM_BANNER)
    assert levels == ["full", "short", "endpoints", "pointer", "pointer"]
    pointer = index.render(1, COUNTER).text
    assert "seq 1-20000" in pointer and "ms.expand" in pointer


def test_the_banner_is_the_same_text_at_every_level_and_size():
    tails = {
        filled(n).render(b, COUNTER).text.split("\n")[-2:] == SEAM_BANNER.split("\n")
        for n in (1, 50, 900)
        for b in (1, 200, 10_000)
    }
    assert tails == {True}


def test_an_empty_index_renders_nothing():
    rendered = EvictionIndex().render(1_000, COUNTER)
    assert (rendered.text, rendered.tokens, rendered.level) == ("", 0, "empty")


def test_render_without_banner_leaves_it_to_the_caller():
    assert SEAM_BANNER not in filled(3).render(1_000, COUNTER, banner=False).text


def test_retier_keeps_coverage_under_a_smaller_cap():
    index = filled(500)
    smaller = index.retier(3)
    smaller.check()
    assert smaller.coverage()[0][0] == 1 and smaller.coverage()[-1][1] == 500
