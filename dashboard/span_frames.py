"""Live span rows, rendered once where the spans are sent and shared by every socket.

A finished span becomes a row of ``dashboard/_span_row.html`` (the partial the traces and
session pages include, so a live row and a reloaded one are the same markup), and a batch of
rows one frame: ``dashboard/_span_oob.html`` wraps them, newest first, in one ``<tbody>`` that
htmx's ws extension prepends to every ``#span-rows`` on the page.

The span sink renders each span's row once, in its own thread, and sends each group one
``spans.finished`` message holding the spans (what the consumers filter on), their rows and
the group's frame: a socket that shows every span of the batch writes the frame as it came,
one that shows some (the traces page's filters, a user who reads fewer sessions, a span the
catch-up already sent) joins the rows it shows, and nothing is rendered per socket.

Span rows come from ``SpanRecord.to_dict()`` dicts (scroll_core.telemetry) or from the
persisted span model; both go through ``span_row``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from django.template.loader import render_to_string
from django.urls import get_script_prefix, reverse
from django.utils.safestring import mark_safe

from dashboard.groups import session_safe_id

__all__ = [
    "DEFAULT_SLOW_MS",
    "TIMELINE_SPANS",
    "link",
    "render_row",
    "span_frame",
    "span_row",
    "spans_message",
    "status_label",
]

# A span at least this long is "slow" on the traces page unless the filter says otherwise.
DEFAULT_SLOW_MS = 100.0
# Attributes worth a glance in a one-line row, in this order; the detail page shows all.
_ROW_ATTRIBUTES = (
    "scroll.seq_lo",
    "scroll.seq_hi",
    "scroll.tier",
    "scroll.tokens_before",
    "scroll.tokens_after",
    "scroll.trigger_tokens",
    "scroll.fields",
    "scroll.block",
    "scroll.query",
    "gen_ai.tool.name",
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens",
    "error.type",
)
# Spans that change the view (or how it is built): on the session timeline as well as the feed.
TIMELINE_SPANS = frozenset(
    {"scroll.evict", "scroll.fold", "scroll.compress", "scroll.profile.applied"}
)


def _iso_from_ns(ns: int | None) -> str:
    if not ns:
        return ""
    return datetime.fromtimestamp(ns / 1e9, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# A row's three links were a third of its render as ``{% url %}`` tags (``reverse`` walks the
# resolver each time). A value made only of these characters comes out of ``reverse`` as it
# went in (none is quoted, none needs escaping in HTML), so the route is reversed once and the
# value put in its place; any other value (and a "." or ".." segment, which ``reverse`` quotes)
# still goes through ``reverse``.
_PLAIN = re.compile(r"[\w.:~-]+", re.ASCII)
_SLOT = "0slot0"


@functools.lru_cache(maxsize=32)
def _route(name: str, script_prefix: str) -> tuple[str, str]:
    head, _, tail = reverse(name, args=[_SLOT]).rpartition(_SLOT)
    return head, tail


def link(name: str, value: str) -> str:
    """``reverse(name, args=[value])``, without reversing the route again for a plain value."""
    if not _PLAIN.fullmatch(value) or not value.strip("."):
        return reverse(name, args=[value])
    head, tail = _route(name, get_script_prefix())
    return head + value + tail


def status_label(status: str | None) -> str:
    # OpenTelemetry's UNSET means no error was recorded: to an operator that is "ok".
    return "error" if status == "error" else "ok"


def span_row(span: dict[str, Any]) -> dict[str, Any]:
    """A template-ready row of one finished span."""
    attributes = span.get("attributes") or {}
    session_id = span.get("session_id") or attributes.get("gen_ai.conversation.id")
    name = span.get("name", "")
    duration = float(span.get("duration_ms") or 0.0)
    span_id, trace_id = span.get("span_id", ""), span.get("trace_id", "")
    return {
        "span_id": span_id,
        "url": link("span", span_id),
        "trace_id": trace_id,
        "trace_url": link("trace", trace_id) if trace_id else "",
        "parent_id": span.get("parent_id"),
        "name": name,
        "session_id": session_id,
        "session_safe_id": session_safe_id(session_id) if session_id else "",
        "session_url": link("session", session_id) if session_id else "",
        "end_ns": int(span.get("end_ns") or 0),
        "ended_at": _iso_from_ns(span.get("end_ns")),
        "duration_ms": duration,
        "status": status_label(span.get("status")),
        "status_message": span.get("status_message") or "",
        "error": span.get("status") == "error",
        "slow": duration >= DEFAULT_SLOW_MS,
        "timeline": name in TIMELINE_SPANS,
        "css_name": re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-"),
        "summary": [(k, attributes[k]) for k in _ROW_ATTRIBUTES if k in attributes],
    }


def render_row(span: dict[str, Any]) -> str:
    """One span's ``<tr>`` (``dashboard/_span_row.html``)."""
    return render_to_string("dashboard/_span_row.html", {"s": span_row(span)})


def span_frame(rows: Sequence[str]) -> str:
    """Rows (oldest first, as the spans of a message) as one frame, newest on top."""
    joined = mark_safe("".join(reversed(rows)))  # rows rendered by render_row: escaped there
    return render_to_string("dashboard/_span_oob.html", {"rows": joined}).strip()


def spans_message(spans: list[dict[str, Any]], rows: Sequence[str] | None = None) -> dict[str, Any]:
    """``spans.finished`` for spans (oldest first) with their rows and the batch's frame;
    ``rows`` are the spans' ``render_row``, rendered here when not given."""
    if rows is None:
        rows = [render_row(span) for span in spans]
    if len(rows) != len(spans):
        raise ValueError(f"{len(rows)} rows for {len(spans)} spans")
    return {
        "type": "spans.finished",
        "spans": spans,
        "rows": list(rows),
        "frame": span_frame(rows),
    }
