"""Links into the context window inspector and trace trees, for pages that only point there
(kept apart from ``inspector_views`` so ``views`` can use them without an import cycle)."""

from __future__ import annotations

from django.urls import reverse

from dashboard.telemetry.models import SpanRecord

__all__ = ["call_url_for_span"]


def call_url_for_span(record: SpanRecord) -> str | None:
    """The inspector's URL for a ``chat`` span's call, or None for other spans."""
    attrs = record.attributes or {}
    turn, step = attrs.get("scroll.turn"), attrs.get("scroll.step")
    if not record.session_id or not record.name.startswith("chat "):
        return None
    base = reverse("session_call_at", args=[record.session_id])
    if turn is None:  # a gateway call: found by its span in the call record
        return f"{base}?span={record.span_id}"
    return f"{base}?turn={turn}&step={step if step is not None else 0}&span={record.span_id}"
