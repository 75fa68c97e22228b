"""The parts of a session page that change while it runs, built the same way for the page
(``views.session``) and for the frames its socket sends (``consumers.SessionConsumer``).

Parts: the header figures, the index table, the kernel panel, the chart figures and the
timeline. The timeline lists compress records (``compress none`` ones hidden unless asked
for), profile changes and operators' kernel restarts and stops, newest first,
``TIMELINE_PAGE`` entries a page; live entries are the ones written after the socket's
cursors (the newest compress, change and kernel action ids it shows).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.template.loader import render_to_string

from dashboard.console import session_panels
from dashboard.record.models import WireCall
from dashboard.runs.models import CompressEvent, KernelAction, ProfileChange, RunRecord
from dashboard.telemetry.cost import cost_context

TIMELINE_PAGE = 20
_BLOCK_KEY = re.compile(r"^t(\d+):(-?\d+)-(-?\d+)$")
# Entries at the same moment: a compress, then a profile change, then a kernel action.
_KINDS = {"compress": 0, "profile": 1, "kernel": 2}
_DOM_PREFIX = {"compress": "compress", "profile": "profile-change", "kernel": "kernel-action"}


@dataclass(frozen=True)
class TimelineEntry:
    """One line of the timeline: a compress record, a profile change or a kernel action."""

    kind: str  # "compress", "profile" or "kernel"
    at: datetime
    item: Any

    @property
    def dom_id(self) -> str:
        return f"{_DOM_PREFIX[self.kind]}-{self.item.id}"


@dataclass(frozen=True)
class TimelinePage:
    entries: list[TimelineEntry]
    page: int
    older_page: int | None
    newer_page: int | None
    hidden_none: int
    show_none: bool
    compress_after: int
    change_after: int
    action_after: int


def _changes(run: RunRecord | None) -> list[ProfileChange]:
    if run is None:
        return []
    return list(run.profile_changes().select_related("changed_by"))


def _merge(
    compresses: list[CompressEvent], changes: list[ProfileChange], actions: list[KernelAction]
) -> list[TimelineEntry]:
    entries = [TimelineEntry("compress", c.at, c) for c in compresses]
    entries += [TimelineEntry("profile", ch.changed_at, ch) for ch in changes]
    entries += [TimelineEntry("kernel", a.at, a) for a in actions]
    return sorted(entries, key=lambda e: (e.at, _KINDS[e.kind], e.item.id), reverse=True)


def timeline_page(
    session_id: str, run: RunRecord | None, *, page: int = 1, show_none: bool = False
) -> TimelinePage:
    """Page ``page`` (1 = newest) of the session's timeline."""
    page = max(1, page)
    every = CompressEvent.objects.filter(session_id=session_id)
    compress_after = every.order_by("-id").values_list("id", flat=True).first() or 0
    shown = every if show_none else every.exclude(action="none")
    hidden = 0 if show_none else every.filter(action="none").count()
    changes = _changes(run)
    actions = KernelAction.objects.filter(session_id=session_id)
    action_after = actions.order_by("-id").values_list("id", flat=True).first() or 0
    # Enough of the newest compresses and actions to fill this page whatever the rest take.
    upto = page * TIMELINE_PAGE
    compresses = list(shown.order_by("-at", "-id")[: upto + 1])
    merged = _merge(compresses, changes, list(actions.order_by("-at", "-id")[: upto + 1]))
    entries = merged[upto - TIMELINE_PAGE : upto]
    return TimelinePage(
        entries=entries,
        page=page,
        older_page=page + 1 if len(merged) > upto else None,
        newer_page=page - 1 if page > 1 else None,
        hidden_none=hidden,
        show_none=show_none,
        compress_after=compress_after,
        change_after=max((ch.id for ch in changes), default=0),
        action_after=action_after,
    )


def timeline_after(
    session_id: str,
    run: RunRecord | None,
    compress_after: int,
    change_after: int,
    action_after: int,
    *,
    show_none: bool = False,
) -> tuple[list[TimelineEntry], int, int, int]:
    """Entries written after the cursors (newest first) and the cursors that follow them."""
    rows = CompressEvent.objects.filter(session_id=session_id, id__gt=compress_after)
    compresses = list(rows.order_by("-id")[:200])
    if compresses:
        compress_after = compresses[0].id
    if not show_none:
        compresses = [c for c in compresses if c.action != "none"]
    changes = [ch for ch in _changes(run) if ch.id > change_after]
    change_after = max([change_after] + [ch.id for ch in changes])
    actions = list(
        KernelAction.objects.filter(session_id=session_id, id__gt=action_after).order_by("-id")
    )
    action_after = max([action_after] + [a.id for a in actions])
    return _merge(compresses, changes, actions), compress_after, change_after, action_after


# ------------------------------------------------------------------------ retrievals
def block_range(key: str) -> tuple[int, int] | None:
    """The seq range of a block key (``t0:12-40``), None for anything else."""
    match = _BLOCK_KEY.match(key)
    return (int(match.group(2)), int(match.group(3))) if match else None


def retrievals_per_block(
    blocks: list[dict[str, Any]], counts: Counter[str]
) -> list[tuple[str, int]]:
    """Each evicted span (the index's blocks) with how many expands hit it.

    A retrieval is recorded under the key the block had then; a block merged into a higher
    tier since counts the retrievals of every key whose range it covers, so the index table
    and the chart agree. Retrieved keys no current block covers are listed too.
    """
    rows: list[tuple[str, int]] = []
    claimed: set[str] = set()
    ranges = {key: block_range(key) for key in counts}
    for block in blocks:
        lo, hi = block["lo_seq"], block["hi_seq"]
        hits = 0
        for key, span in ranges.items():
            if key == block["key"] or (span is not None and lo <= span[0] and span[1] <= hi):
                hits += counts[key]
                claimed.add(key)
        rows.append((block["key"], hits))
    rows += [(key, n) for key, n in sorted(counts.items()) if key not in claimed]
    return rows


# A never-read span is drawn as a grey stub this share of the y axis high: its count is 0,
# which as a bar has no height and shows nothing.
NEVER_READ_STUB = 0.05
NEVER_READ_COLOR = "#8f99a3"


def retrieval_figure(rows: list[tuple[str, int]]) -> dict[str, Any]:
    """One bar per evicted span (its retrievals), and a grey stub on each span never read."""
    layout: dict[str, Any] = {
        "margin": {"t": 30, "r": 10, "b": 80, "l": 50},
        "height": 260,
        "uirevision": "keep",
        "xaxis": {"title": {"text": "evicted span (tier:seq range)"}, "type": "category"},
        "yaxis": {"title": {"text": "retrievals (expands that hit it)"}, "rangemode": "tozero"},
    }
    if not rows:
        layout["xaxis"] = {"visible": False}
        layout["yaxis"] = {"visible": False}
        layout["annotations"] = [
            {
                "text": "Nothing evicted yet: no span to retrieve.",
                "showarrow": False,
                "xref": "paper",
                "yref": "paper",
                "x": 0.5,
                "y": 0.5,
            }
        ]
        return {"data": [], "layout": layout}
    keys = [key for key, _ in rows]
    values = [n for _, n in rows]
    top = max(values)
    if top == 0:
        # Only stubs: without a fixed range the axis would stretch them to its full height.
        layout["yaxis"] |= {"range": [0, 1], "dtick": 1}
    stub = max(top, 1) * NEVER_READ_STUB
    never = [key for key, n in rows if n == 0]
    bar = {
        "type": "bar",
        "name": "retrievals",
        "x": keys,
        "y": values,
        "text": [str(n) for n in values],
        "textposition": "outside",
        "marker": {"color": "#1f5fa8"},
    }
    stubs = {
        "type": "bar",
        "name": "never read (0 retrievals)",
        "x": never,
        "y": [stub] * len(never),
        "marker": {"color": NEVER_READ_COLOR},
        "hovertemplate": "%{x}: never read<extra></extra>",
    }
    layout |= {
        # Each span has one bar or one stub, so they overlay in its one slot; the axis keeps
        # the index's order (a second trace would otherwise append its categories).
        "barmode": "overlay",
        "showlegend": True,
        "legend": dict(session_panels.LEGEND_ABOVE),
    }
    layout["xaxis"] |= {"categoryorder": "array", "categoryarray": keys}
    return {"data": [bar, stubs], "layout": layout}


# ------------------------------------------------------------------------- the parts
def parts_context(session_id: str) -> dict[str, Any]:
    """Header, index, kernel and chart figures of a session, as the templates want them."""
    from dashboard.eventlog import get_event_log

    summary = get_event_log().session(session_id)
    run = RunRecord.objects.select_related("profile").filter(session_id=session_id).first()
    counts = session_panels.retrievals(session_id)
    blocks = session_panels.index_blocks(session_id, counts)
    per_block = retrievals_per_block(blocks, counts)
    hits = dict(per_block)
    for block in blocks:
        block["retrievals"] = hits.get(block["key"], 0)
    calls = list(WireCall.objects.filter(session_id=session_id).order_by("index"))
    if calls:  # one point per upstream call, as sent
        budget = session_panels.recorded_budget_figure(calls)
        points: list[Any] = calls
    else:  # a session from before the record: after each compress
        points = list(CompressEvent.objects.filter(session_id=session_id).order_by("at", "id"))
        budget = session_panels.budget_figure(points)
    budget["layout"]["uirevision"] = "keep"
    return {
        "session_id": session_id,
        "summary": summary,
        "run": run,
        "blocks": blocks,
        "kernel": session_panels.kernel_of(session_id),
        "budget": budget,
        "retrieval_chart": retrieval_figure(per_block),
        "has_points": bool(points),
    }


def recorded_calls(session_id: str) -> int:
    """How many upstream calls the session's record holds (the cost panel's cursor)."""
    return WireCall.objects.filter(session_id=session_id).count()


def render_cost(session_id: str) -> str:
    """The cost panel as an out-of-band frame: a call shows up priced while the session
    runs, not at the next reload."""
    ctx = cost_context(session_id) | {"session_id": session_id, "oob": True}
    return render_to_string("dashboard/_session_cost.html", ctx).strip()


def render_parts(parts: dict[str, Any]) -> list[str]:
    """The header, index, kernel and figures (``parts_context``) as out-of-band frames."""
    ctx = parts | {"oob": True}
    names = ("_session_summary", "_session_index", "_session_kernel", "_session_figures")
    return [render_to_string(f"dashboard/{name}.html", ctx).strip() for name in names]


def render_pager(timeline: TimelinePage) -> str:
    """The timeline's pager (older/newer links, the hidden "compress none" count) as a frame."""
    return render_to_string(
        "dashboard/_timeline_pager.html", {"timeline": timeline, "oob": True}
    ).strip()


def render_timeline(entries: list[TimelineEntry]) -> str:
    """Live timeline entries, newest first, prepended to ``#timeline``."""
    return render_to_string("dashboard/_timeline_oob.html", {"entries": entries}).strip()
