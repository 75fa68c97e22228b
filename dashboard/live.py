"""What the live pages show, shared by the views (rows from the database) and the consumers
(rows from channel messages), so a row looks the same whichever way it arrived.

Span rows come from ``SpanRecord.to_dict()`` dicts (scroll_core.telemetry) or from the
persisted span model; both go through ``span_row``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from dashboard.groups import session_safe_id

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


def span_row(span: dict[str, Any]) -> dict[str, Any]:
    """A template-ready row of one finished span."""
    attributes = span.get("attributes") or {}
    session_id = span.get("session_id") or attributes.get("gen_ai.conversation.id")
    name = span.get("name", "")
    duration = float(span.get("duration_ms") or 0.0)
    return {
        "span_id": span.get("span_id", ""),
        "trace_id": span.get("trace_id", ""),
        "parent_id": span.get("parent_id"),
        "name": name,
        "session_id": session_id,
        "session_safe_id": session_safe_id(session_id) if session_id else "",
        "end_ns": int(span.get("end_ns") or 0),
        "ended_at": _iso_from_ns(span.get("end_ns")),
        "duration_ms": duration,
        "status": span.get("status", "unset"),
        "status_message": span.get("status_message") or "",
        "error": span.get("status") == "error",
        "slow": duration >= DEFAULT_SLOW_MS,
        "timeline": name in TIMELINE_SPANS,
        "css_name": re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-"),
        "summary": [(k, attributes[k]) for k in _ROW_ATTRIBUTES if k in attributes],
    }


@dataclass(frozen=True)
class SpanFilter:
    """The traces page's filters: session, operation (span name prefix), errors, slow."""

    session: str = ""
    operation: str = ""
    errors: bool = False
    slow_ms: float | None = None

    @classmethod
    def from_query(cls, query: Any) -> SpanFilter:
        slow_raw = (query.get("slow_ms") or "").strip()
        try:
            slow_ms = float(slow_raw) if slow_raw else None
        except ValueError:
            slow_ms = None
        if query.get("slow") and slow_ms is None:
            slow_ms = DEFAULT_SLOW_MS
        return cls(
            session=(query.get("session") or "").strip(),
            operation=(query.get("op") or "").strip(),
            errors=query.get("errors") in {"1", "on", "true"},
            slow_ms=slow_ms,
        )

    def matches(self, span: dict[str, Any]) -> bool:
        if self.session and (span.get("session_id") or "") != self.session:
            return False
        if self.operation and not (span.get("name") or "").startswith(self.operation):
            return False
        if self.errors and span.get("status") != "error":
            return False
        return not (self.slow_ms is not None and float(span.get("duration_ms") or 0) < self.slow_ms)

    def query_string(self) -> str:
        from urllib.parse import urlencode

        params: dict[str, str] = {}
        if self.session:
            params["session"] = self.session
        if self.operation:
            params["op"] = self.operation
        if self.errors:
            params["errors"] = "1"
        if self.slow_ms is not None:
            params["slow_ms"] = f"{self.slow_ms:g}"
        return urlencode(params)


def alert_row(alert: dict[str, Any]) -> dict[str, Any]:
    return dict(alert)


def open_alert_count() -> int:
    from dashboard.alerts import open_alert_count as count

    return count()
