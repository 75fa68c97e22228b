"""What a session's page shows beside its events, shared by the page (``views``) and the
frames its socket sends (``session_live``): the budget chart, how often each evicted block was
read back, the index as the worker saved it and the session's kernel."""

from __future__ import annotations

from collections import Counter
from typing import Any

from dashboard.record.models import WireCall
from dashboard.runs.models import CompressEvent
from dashboard.telemetry.models import SpanRecord

__all__ = [
    "LEGEND_ABOVE",
    "budget_figure",
    "index_blocks",
    "kernel_of",
    "kernels",
    "recorded_budget_figure",
    "retrievals",
    "runner_module",
]

# A chart's legend in a row above its plot: below it, a horizontal legend covers the x axis's
# labels and title (the budget chart's dates). Plotly widens the top margin to fit it.
LEGEND_ABOVE = {"orientation": "h", "x": 0, "xanchor": "left", "y": 1.02, "yanchor": "bottom"}


def budget_figure(points: list[CompressEvent]) -> dict[str, Any]:
    """View composition after each compress, stacked by section, with trigger and C lines."""
    x = [p.at.isoformat() for p in points]
    traces: list[dict[str, Any]] = [
        {
            "type": "scatter",
            "mode": "lines",
            "stackgroup": "view",
            "name": section,
            "x": x,
            "y": [p.sections()[section] for p in points],
            # A click on a point opens the call after that compress (static/inspector.js).
            "customdata": [p.id for p in points],
        }
        for section in ("prefix", "index", "digest", "folded", "tail")
    ]
    for name, attr, dash in (("trigger", "trigger_tokens", "dash"), ("C", "context_size", "dot")):
        traces.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": name,
                "x": x,
                "y": [getattr(p, attr) for p in points],
                "line": {"dash": dash, "color": "#b3261e" if name == "trigger" else "#333"},
                # A click on the trigger or C line at a call opens that call as well.
                "customdata": [p.id for p in points],
            }
        )
    layout = {
        "margin": {"t": 30, "r": 10, "b": 40, "l": 60},
        "height": 300,
        "yaxis": {"title": {"text": "tokens"}},
        "legend": dict(LEGEND_ABOVE),
        "hovermode": "x",
        # Calls are placed by time, so under a slow model they bunch and leave gaps wider
        # than Plotly's default 20 px hover distance, where a click would open nothing. -1 is
        # "no limit": a hover (and so a click) anywhere in the plot picks the nearest call.
        "hoverdistance": -1,
    }
    return {"data": traces, "layout": layout}


def recorded_budget_figure(calls: list[WireCall]) -> dict[str, Any]:
    """The view sent with each upstream call (the call record), stacked by section, at the
    call's own time, with trigger and C lines: one point per call, however the console's
    bookkeeping batched them."""
    points = [c for c in calls if c.view]
    x = [c.started_at.isoformat() for c in points]
    ids = [f"call:{c.index}" for c in points]
    traces: list[dict[str, Any]] = [
        {
            "type": "scatter",
            "mode": "lines+markers",
            "marker": {"size": 4},
            "stackgroup": "view",
            "name": section,
            "x": x,
            "y": [c.view.get(section, 0) for c in points],
            "customdata": ids,  # a click opens that call (static/inspector.js)
        }
        for section in ("prefix", "index", "digest", "folded", "tail")
    ]
    for name, key, dash in (("trigger", "trigger_tokens", "dash"), ("C", "context_size", "dot")):
        traces.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": name,
                "x": x,
                "y": [c.view.get(key) for c in points],
                "line": {"dash": dash, "color": "#b3261e" if name == "trigger" else "#333"},
                "customdata": ids,
            }
        )
    figure = budget_figure([])
    figure["data"] = traces
    return figure


def retrievals(session_id: str) -> Counter[str]:
    """How often each evicted block was hit by an expand (scroll.blocks of scroll.expand)."""
    counts: Counter[str] = Counter()
    spans = SpanRecord.objects.filter(session_id=session_id, name="scroll.expand")
    for attributes in spans.values_list("attributes", flat=True)[:5000]:
        for block in (attributes or {}).get("scroll.blocks") or ():
            counts[str(block)] += 1
    return counts


def runner_module() -> Any:
    """dashboard.runs.runner, imported on first use: it owns the live sessions and kernels."""
    import importlib
    from types import SimpleNamespace

    try:
        return importlib.import_module("dashboard.runs.runner")
    except ModuleNotFoundError as exc:
        if exc.name != "dashboard.runs.runner":
            raise
        # A console built without the runner still browses logs, spans and alerts.
        return SimpleNamespace()


def index_blocks(session_id: str, counts: Counter[str]) -> list[dict[str, Any]]:
    """The session's index, tier by tier, as its worker saved it at the last compress."""
    index = getattr(runner_module(), "session_index", lambda _sid: None)(session_id)
    if index is None:
        from dashboard.gateway.service import get_service  # a gateway session's live index

        index = get_service().session_index(session_id)
    if index is None:
        return []
    blocks = [block.to_dict() | {"key": block.key} for block in index.blocks]
    for block in blocks:
        block["retrievals"] = counts.get(block["key"], 0)
    return sorted(blocks, key=lambda b: (-b["tier"], b["lo_seq"]))


def kernel_of(session_id: str) -> dict[str, Any] | None:
    """The session's kernel as its worker last recorded it (any process can show it)."""
    state: dict[str, Any] | None = getattr(runner_module(), "kernel_state", lambda _sid: None)(
        session_id
    )
    return state


def kernels() -> list[dict[str, Any]]:
    statuses: list[dict[str, Any]] = getattr(runner_module(), "kernel_statuses", lambda: [])()
    return [dict(k) for k in statuses]
