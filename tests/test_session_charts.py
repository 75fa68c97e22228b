"""The session page's charts as figures (issue 29): a span never read back is drawn, and the
budget chart's legend keeps off its time axis."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from dashboard.console import session_live, session_panels
from dashboard.runs.models import CompressEvent


def _heights(figure) -> dict[str, float]:
    """Each span's drawn height: the tallest bar any trace draws at it."""
    drawn: dict[str, float] = {}
    for trace in figure["data"]:
        for key, y in zip(trace["x"], trace["y"], strict=True):
            drawn[key] = max(drawn.get(key, 0), y)
    return drawn


def test_a_span_never_read_is_drawn_with_a_height_and_named_in_the_legend():
    rows = [("t1:1-80", 4), ("t0:81-120", 0), ("t0:121-160", 1), ("t0:161-200", 0)]

    figure = session_live.retrieval_figure(rows)

    heights = _heights(figure)
    assert all(heights[key] > 0 for key, _ in rows), heights
    bars, stubs = figure["data"]
    # The counts stay the counts; the stubs are a trace of their own, grey, named for it.
    assert bars["y"] == [4, 0, 1, 0]
    assert stubs["x"] == ["t0:81-120", "t0:161-200"]
    assert "never read" in stubs["name"] and stubs["marker"]["color"] != bars["marker"]["color"]
    assert figure["layout"]["showlegend"] is True
    # A stub is short beside a real count, so it is not read as one.
    assert max(stubs["y"]) < 1
    # Overlaid in each span's slot, in the index's order.
    assert figure["layout"]["barmode"] == "overlay"
    assert figure["layout"]["xaxis"]["categoryarray"] == [key for key, _ in rows]


def test_when_no_span_was_ever_read_the_stubs_stay_short():
    figure = session_live.retrieval_figure([("t0:1-40", 0), ("t0:41-80", 0)])

    _, stubs = figure["data"]
    low, high = figure["layout"]["yaxis"]["range"]
    assert 0 < max(stubs["y"]) <= (high - low) / 10


def test_every_span_read_back_has_no_stubs():
    _, stubs = session_live.retrieval_figure([("t0:1-40", 2)])["data"]
    assert stubs["x"] == [] and stubs["y"] == []


def _point(at: datetime, **fields) -> CompressEvent:
    base = {"session_id": "s1", "turn": 1, "step": 0, "action": "evict", "tokens_before": 5000,
            "tokens_after": 3000, "trigger_tokens": 4800, "context_size": 6000}  # fmt: skip
    return CompressEvent(at=at, **(base | fields))


@pytest.mark.parametrize("chart", ["budget", "retrieval"])
def test_a_charts_legend_sits_above_its_plot_clear_of_the_x_axis(chart):
    if chart == "budget":
        start = datetime(2026, 1, 2, 3, 4, tzinfo=UTC)
        figure = session_panels.budget_figure(
            [_point(start + timedelta(seconds=i)) for i in (0, 9)]
        )
    else:
        figure = session_live.retrieval_figure([("t0:1-40", 0), ("t0:41-80", 3)])

    legend = figure["layout"]["legend"]
    # y is in the plot's height (0 = its bottom, where the x axis's labels hang below); a
    # legend anchored by its bottom at or above 1 lies wholly above the plot.
    assert legend["yanchor"] == "bottom" and legend["y"] >= 1
    assert legend["orientation"] == "h"
