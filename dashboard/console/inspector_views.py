"""The context window inspector and trace trees (issue 11).

``/sessions/<id>/calls/<n>/`` shows call ``n``'s exact window, section by section, with its
diff against call ``n - 1``, its index blocks linked to their events, its cost and its
``chat`` span. ``/sessions/<id>/calls/?compress=<row id>`` (the budget chart and the
timeline), ``?turn=&step=`` (a model span) or ``?seq=`` find the call and redirect to it.
``/traces/<trace id>/`` draws a trace's spans as a tree with a waterfall of durations.
Included from ``dashboard/urls.py``; login required.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import path, reverse
from django.views.decorators.http import require_GET

from dashboard.console import live
from dashboard.console.inspector_links import call_url_for_span
from dashboard.console.recorded_views import render_recorded_call, sent_body
from dashboard.console.views import _grafana_trace_url
from dashboard.projects.access import access_of, require_session
from dashboard.record.models import WireCall
from dashboard.record.read import has_record
from dashboard.runs.inforce import Recorded, load_recorded
from dashboard.runs.models import CompressEvent
from dashboard.span_frames import status_label
from dashboard.telemetry.cost import call_costs
from dashboard.telemetry.models import SpanRecord
from scroll_core.replay import CallPoint, CompressPoint, TraceError, inspect_call
from scroll_core.store.schema_common import SQLITE_INT_MAX

__all__ = ["session_call", "session_call_at", "trace_tree", "urlpatterns"]

# Spans drawn on one trace page (a trace of a long turn has a few hundred).
TRACE_SPANS = 2000


def _get_recorded(session_id: str) -> Recorded:
    try:
        return load_recorded(session_id)
    except TraceError as exc:
        raise Http404(str(exc)) from None


def _get_int(request: HttpRequest, name: str) -> int | None:
    raw = request.GET.get(name, "").strip()
    if not raw:
        return None
    if not (raw.isascii() and raw.isdigit()) or int(raw) > SQLITE_INT_MAX:
        raise Http404(f"{name} must be a non-negative integer")
    return int(raw)


def _chat_span(session_id: str, turn: int | None, step: int | None) -> SpanRecord | None:
    """The recorded ``chat`` span of the call (its last attempt), if still kept."""
    spans = SpanRecord.objects.filter(session_id=session_id, name__startswith="chat ")
    for span in spans.order_by("-id")[:TRACE_SPANS]:
        attrs = span.attributes or {}
        if attrs.get("scroll.turn") == turn and attrs.get("scroll.step") == step:
            return span
    return None


def _call_after_compress(recorded: Recorded, row_id: int, session_id: str) -> int:
    ids = list(
        CompressEvent.objects.filter(session_id=session_id)
        .order_by("id")
        .values_list("id", flat=True)
    )
    if row_id not in ids:
        raise Http404("No such compress in this session")
    trace = recorded.trace
    points = trace.compresses
    target = points[min(ids.index(row_id), len(points) - 1)] if points else None
    after = False
    for point in trace.timeline:
        if point is target:
            after = True
        elif after and isinstance(point, CallPoint):
            return point.index
    return len(trace.calls) - 1


@login_required
@require_GET
def session_call_at(request: HttpRequest, session_id: str) -> HttpResponse:
    """Find a call by its span, the compress before it, its turn and step, or its seq."""
    require_session(request, session_id)
    span_id = request.GET.get("span", "").strip()
    if span_id and has_record(session_id):
        found = WireCall.objects.filter(session_id=session_id, span_id=span_id).first()
        if found is None:
            raise Http404("No recorded call ran in that span")
        return redirect("session_call", session_id, found.index)
    if has_record(session_id) and request.GET.get("compress") is None:
        return redirect("session_call", session_id, _recorded_index(request, session_id))
    recorded = _get_recorded(session_id)
    calls = recorded.trace.calls
    if not calls:
        raise Http404(f"{session_id} has no model calls")
    row, turn, seq = (
        _get_int(request, "compress"),
        _get_int(request, "turn"),
        _get_int(request, "seq"),
    )
    if row is not None:
        index = _call_after_compress(recorded, row, session_id)
    elif turn is not None:
        step = _get_int(request, "step")
        found = [c for c in calls if c.turn == turn and (step is None or c.step == step)]
        if not found:
            raise Http404(f"No model call at turn {turn}, step {step}")
        index = found[-1].index
    elif seq is not None:
        index = max((c.index for c in calls if c.seq <= seq), default=0)
    else:
        index = len(calls) - 1
    return redirect("session_call", session_id, index)


def _recorded_index(request: HttpRequest, session_id: str) -> int:
    """A recorded call by turn and step (its last attempt), else the session's last."""
    rows = WireCall.objects.filter(session_id=session_id)
    turn = _get_int(request, "turn")
    if turn is not None:
        rows = rows.filter(turn=turn)
        step = _get_int(request, "step")
        if step is not None:
            rows = rows.filter(step=step)
    found = rows.order_by("-index").values_list("index", flat=True).first()
    if found is None:
        raise Http404("No recorded model call there")
    return found


def _section_rows(window: Any) -> list[dict[str, Any]]:
    total = window.total or 1
    return [
        {"name": name, "tokens": tokens, "share": round(100 * tokens / total, 1)}
        for name, tokens in window.sections.items()
    ]


def _events_url(session_id: str, lo: int) -> str:
    return f"{reverse('session', args=[session_id])}?after={max(0, lo - 1)}#e{lo}"


@login_required
@require_GET
def session_call(request: HttpRequest, session_id: str, call: int) -> HttpResponse:
    require_session(request, session_id)
    if has_record(session_id):  # what was sent, as sent
        return render_recorded_call(request, session_id, call)
    recorded = _get_recorded(session_id)
    trace = recorded.trace
    try:
        window = inspect_call(trace, recorded.final, call, profiles=recorded.profiles)
    except TraceError as exc:
        raise Http404(str(exc)) from None
    point = trace.calls[call]
    span = _chat_span(session_id, point.turn, point.step)
    cost = call_costs(session_id).get(call)
    diff = window.diff
    blocks = sorted(window.blocks, key=lambda b: (-b.tier, b.lo_seq))
    ctx = {
        "ws_url": live.ws_url("/ws/alerts/"),
        "session_id": session_id,
        "window": window,
        "point": point,
        "profile_name": recorded.profile_name,
        "sections": _section_rows(window),
        "parts": window.parts,
        "blocks": [{"block": b, "url": _events_url(session_id, b.lo_seq)} for b in blocks],
        "diff": diff,
        "evicted_url": _events_url(session_id, diff.evicted[0]) if diff.evicted else None,
        "previous": call - 1 if call > 0 else None,
        "next": call + 1 if call + 1 < window.calls else None,
        "span": span,
        "cost": cost,
        "compress": next(
            (
                p
                for p in reversed(trace.timeline[: trace.timeline.index(point)])
                if isinstance(p, CompressPoint)
            ),
            None,
        ),
        "messages_json": json.dumps(window.messages, ensure_ascii=False, indent=1),
        "rebuilt": True,  # no call record: the page says so in a banner
    }
    return render(request, "dashboard/call.html", ctx)


def _tree(spans: list[SpanRecord]) -> list[dict[str, Any]]:
    """Spans depth first under their parents (orphans, whose parent was not kept, as roots),
    each with its depth and its bar in the waterfall (offset and width in % of the trace)."""
    ids = {s.span_id for s in spans}
    children: dict[str | None, list[SpanRecord]] = {}
    for s in spans:
        parent = s.parent_id if s.parent_id in ids else None
        children.setdefault(parent, []).append(s)
    for kids in children.values():
        kids.sort(key=lambda s: (s.start_ns, s.id))
    start = min(s.start_ns for s in spans)
    width = max(1, max(s.end_ns for s in spans) - start)
    rows: list[dict[str, Any]] = []
    stack = [(s, 0) for s in reversed(children.get(None, []))]
    while stack:
        span, depth = stack.pop()
        rows.append(
            {
                "span": span,
                # As the Traces list says it: OpenTelemetry's "unset" is "ok" to an operator.
                "status": status_label(span.status),
                "depth": depth,
                "indent": min(depth, 12),
                "offset": round(100 * (span.start_ns - start) / width, 3),
                "width": max(0.2, round(100 * (span.end_ns - span.start_ns) / width, 3)),
                "attributes": sorted((span.attributes or {}).items()),
                "call_url": call_url_for_span(span),
            }
        )
        stack += [(c, depth + 1) for c in reversed(children.get(span.span_id, []))]
    return rows


@login_required
@require_GET
def trace_tree(request: HttpRequest, trace_id: str) -> HttpResponse:
    if not (trace_id.isascii() and trace_id.isalnum() and len(trace_id) <= 32):
        raise Http404("No such trace")
    spans = list(
        access_of(request)
        .scope(SpanRecord.objects.filter(trace_id=trace_id))
        .order_by("start_ns", "id")[:TRACE_SPANS]
    )
    if not spans:
        raise Http404("No spans of that trace are kept")
    rows = _tree(spans)
    total_ms = (max(s.end_ns for s in spans) - min(s.start_ns for s in spans)) / 1e6
    ctx = {
        "ws_url": live.ws_url("/ws/alerts/"),
        "trace_id": trace_id,
        "rows": rows,
        "total_ms": total_ms,
        "errors": sum(1 for s in spans if s.status == "error"),
        "sessions": sorted({s.session_id for s in spans if s.session_id}),
        "grafana_url": _grafana_trace_url(trace_id),
        "truncated": len(spans) >= TRACE_SPANS,
    }
    return render(request, "dashboard/trace.html", ctx)


urlpatterns = [
    path("sessions/<path:session_id>/calls/", session_call_at, name="session_call_at"),
    path("sessions/<path:session_id>/calls/<int:call>/", session_call, name="session_call"),
    path(
        "sessions/<path:session_id>/calls/<int:call>/sent.json",
        sent_body,
        name="session_call_sent",
    ),
    path("traces/<str:trace_id>/", trace_tree, name="trace"),
]
