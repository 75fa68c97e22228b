"""The recorded inspector's arithmetic: the seqs evicted between two calls, from the index
blocks each call carried."""

from __future__ import annotations

from dashboard.console.recorded_views import _newly_covered


def test_the_evicted_range_is_what_the_index_covers_now_and_did_not_before():
    assert _newly_covered([[0, 1, 10, 5, 50]], []) == (1, 10)
    # Nothing new: the same block, or a block merged from the ones before into a higher tier.
    assert _newly_covered([[0, 1, 10, 5, 50]], [[0, 1, 10, 5, 50]]) is None
    assert _newly_covered([[1, 1, 20, 9, 60]], [[0, 1, 10, 5, 50], [0, 11, 20, 4, 40]]) is None
    # A new block after the old ones, and a gap between two old blocks filled.
    assert _newly_covered([[0, 1, 10, 5, 50], [0, 11, 30, 7, 70]], [[0, 1, 10, 5, 50]]) == (11, 30)
    assert _newly_covered([[1, 1, 40, 9, 90]], [[0, 1, 10, 1, 1], [0, 21, 40, 1, 1]]) == (11, 20)
    assert _newly_covered([], [[0, 1, 10, 1, 1]]) is None
