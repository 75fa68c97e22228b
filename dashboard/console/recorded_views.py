"""The call inspector for sessions with a call record (``dashboard.record``): what went
upstream exactly as sent, the reply, the upstream's usage and its price, and what changed
since the call before. Nothing on these pages is rebuilt; ``inspector_views`` dispatches
here when the session has a record and keeps the replayed window for older sessions.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET

from dashboard.console import live
from dashboard.projects.access import require_session
from dashboard.record.models import WireCall
from dashboard.record.read import RecordedCall, recorded_call
from dashboard.telemetry.cost import call_costs
from dashboard.telemetry.models import SpanRecord
from scroll_core.models.base import message_text
from scroll_core.wire import RecordDecodeError

__all__ = ["render_recorded_call", "sent_body"]

PREVIEW_CHARS = 4000


def _load(session_id: str, index: int) -> RecordedCall:
    try:
        return recorded_call(session_id, index)
    except RecordDecodeError as exc:
        raise Http404(str(exc)) from None


def _text(message: Any) -> str:
    if not isinstance(message, dict):
        return json.dumps(message, ensure_ascii=False)
    text = message_text(message)
    if not text and message.get("content"):  # blocks without text: tool uses, results
        text = json.dumps(message["content"], ensure_ascii=False)
    calls = message.get("tool_calls") or []
    names = [c.get("function", {}).get("name", "") for c in calls if isinstance(c, dict)]
    if names:
        text = (text + "\n" if text else "") + "→ " + ", ".join(names)
    return text


def _message_rows(call: RecordedCall) -> list[dict[str, Any]]:
    new = set(call.new_positions)
    rows = []
    for i, message in enumerate(call.messages):
        text = _text(message)
        rows.append(
            {
                "position": i,
                "role": message.get("role", "?") if isinstance(message, dict) else "?",
                "new": i in new,
                "chars": len(text),
                "text": text[:PREVIEW_CHARS],
                "cut": len(text) > PREVIEW_CHARS,
            }
        )
    return rows


def _blocks(view: dict[str, Any] | None) -> list[list[int]]:
    return [list(b) for b in (view or {}).get("blocks") or []]


def _newly_covered(now: list[list[int]], before: list[list[int]]) -> tuple[int, int] | None:
    """The seq range the index covers at this call and did not at the call before: what
    was evicted in between (first and last such seq), by interval arithmetic."""
    had = sorted((b[1], b[2]) for b in before)
    fresh: list[int] = []
    for _tier, lo, hi, *_ in now:
        cursor = lo
        for a, z in had:
            if z < cursor:
                continue
            if a > hi:
                break
            if a > cursor:
                fresh += [cursor, a - 1]
            cursor = max(cursor, z + 1)
        if cursor <= hi:
            fresh += [cursor, hi]
    return (min(fresh), max(fresh)) if fresh else None


def _events_url(session_id: str, lo: int) -> str:
    return f"{reverse('session', args=[session_id])}?after={max(0, lo - 1)}#e{lo}"


def _block_row(session_id: str, block: list[int]) -> dict[str, Any]:
    tier, lo, hi, events, tokens = block[:5]
    return {"tier": tier, "lo": lo, "hi": hi, "events": events, "tokens": tokens,
            "url": _events_url(session_id, lo)}  # fmt: skip


def render_recorded_call(request: HttpRequest, session_id: str, index: int) -> HttpResponse:
    require_session(request, session_id)
    call = _load(session_id, index)
    row = call.row
    before = (
        WireCall.objects.filter(session_id=session_id, index=index - 1)
        .values_list("view", flat=True)
        .first()
    )
    blocks = sorted(_blocks(row.view), key=lambda b: (-b[0], b[1]))
    evicted = _newly_covered(blocks, _blocks(before)) if index > 0 else None
    total = WireCall.objects.filter(session_id=session_id).count()
    span = SpanRecord.objects.filter(span_id=row.span_id).first() if row.span_id else None
    request_fields = {k: v for k, v in (call.request or {}).items() if k not in ("messages",)}
    ctx = {
        "ws_url": live.ws_url("/ws/alerts/"),
        "session_id": session_id,
        "row": row,
        "call": call,
        "calls": total,
        "previous": index - 1 if index > 0 else None,
        "next": index + 1 if index + 1 < total else None,
        "span": span,
        "trace_id": row.trace_id,
        "cost": call_costs(session_id).get(index),
        "rows": _message_rows(call),
        "new_count": len(call.new_positions),
        "sections": sorted(
            ((k, v) for k, v in (row.view or {}).items() if k in _SECTIONS), key=_section_order
        ),
        "params": json.dumps(
            {k: v for k, v in request_fields.items() if k not in ("tools", "system")},
            ensure_ascii=False,
            indent=1,
        ),
        "tools": [
            t.get("function", t).get("name", "?") if isinstance(t, dict) else "?"
            for t in request_fields.get("tools") or []
        ],
        "reply_json": json.dumps(row.reply, ensure_ascii=False, indent=1) if row.reply else "",
        "usage": sorted((row.usage or {}).items()),
        "blocks": [_block_row(session_id, b) for b in blocks],
        "evicted": evicted,
        "evicted_url": _events_url(session_id, evicted[0]) if evicted else None,
    }
    return render(request, "dashboard/call_recorded.html", ctx)


_SECTIONS = ("prefix", "index", "digest", "folded", "tail", "total")


def _section_order(item: tuple[str, Any]) -> int:
    return _SECTIONS.index(item[0])


@login_required
@require_GET
def sent_body(request: HttpRequest, session_id: str, call: int) -> HttpResponse:
    """The request body of a recorded call, the very bytes the upstream received."""
    require_session(request, session_id)
    recorded = _load(session_id, call)
    response = HttpResponse(recorded.body, content_type="application/json")
    response["Content-Disposition"] = f'inline; filename="call-{call}.json"'
    return response
