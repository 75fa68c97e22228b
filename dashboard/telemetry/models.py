"""The tables of telemetry: persisted spans, the "rotting index" alert rules and alerts, and
model prices for cost.

Every model keeps the table it had when the console was one app (``db_table``).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone

from scroll_core.pricing import Rates

__all__ = ["ADMIN_SOURCE", "Alert", "AlertRule", "ModelPrice", "SpanRecord"]

# The price source of a call priced by a ModelPrice row.
ADMIN_SOURCE = "admin"


def _json_size(*values: Any) -> int:
    return sum(len(json.dumps(v, default=str, ensure_ascii=False).encode()) for v in values)


class SpanRecord(models.Model):
    """A finished span, kept for the Traces page (oldest pruned past SCROLL_SPAN_RETENTION
    spans or SCROLL_SPAN_RETENTION_BYTES bytes, whichever comes first)."""

    trace_id = models.CharField(max_length=32, db_index=True)
    span_id = models.CharField(max_length=16, unique=True)
    parent_id = models.CharField(max_length=16, null=True, blank=True)
    name = models.CharField(max_length=200, db_index=True)
    session_id = models.CharField(max_length=200, blank=True, db_index=True)
    kind = models.CharField(max_length=16, default="internal")
    start_ns = models.BigIntegerField()
    end_ns = models.BigIntegerField()
    duration_ms = models.FloatField()
    status = models.CharField(max_length=8, default="unset")  # ok, error, unset
    status_message = models.TextField(blank=True)
    attributes = models.JSONField(default=dict, blank=True)
    events = models.JSONField(default=list, blank=True)
    # What the row's attributes, events and status message weigh as JSON (0 for rows stored
    # before this was counted): retention in bytes sums it.
    size_bytes = models.PositiveIntegerField(default=0)

    class Meta:
        db_table = "dashboard_spanrecord"
        ordering = ["-id"]
        indexes = [models.Index(fields=["session_id", "-id"])]

    def __str__(self) -> str:
        return f"{self.name} {self.duration_ms:.1f} ms"

    @property
    def started(self) -> datetime:
        return datetime.fromtimestamp(self.start_ns / 1e9, tz=UTC)

    @classmethod
    def from_core(cls, record: Any) -> SpanRecord:
        """A row for a ``scroll_core.telemetry.SpanRecord`` (not saved)."""
        return cls(
            trace_id=record.trace_id,
            span_id=record.span_id,
            parent_id=record.parent_id,
            name=record.name[:200],
            session_id=(record.session_id or "")[:200],
            kind=record.kind,
            start_ns=record.start_ns,
            end_ns=record.end_ns,
            duration_ms=record.duration_ms,
            status=record.status,
            status_message=record.status_message or "",
            attributes=record.attributes,
            events=record.events,
            size_bytes=_json_size(record.attributes, record.events, record.status_message or ""),
        )

    def to_dict(self) -> dict[str, Any]:
        """The span as sent in ``span.finished`` messages (the core record's fields + id)."""
        return {
            "id": self.pk,
            "trace_id": self.trace_id,
            "span_id": self.span_id,
            "parent_id": self.parent_id,
            "name": self.name,
            "session_id": self.session_id or None,
            "kind": self.kind,
            "start_ns": self.start_ns,
            "end_ns": self.end_ns,
            "duration_ms": self.duration_ms,
            "status": self.status,
            "status_message": self.status_message or None,
            "attributes": self.attributes,
            "events": self.events,
        }


class AlertRule(models.Model):
    """One alert rule and its threshold ("rotting index" rules over spans, and one per rule of
    the trajectory lint over each finished turn); a migration seeds one per kind."""

    INDEX_GAP = "index_gap"
    HEADLINE_QUALITY = "headline_quality"
    SPAN_REREAD = "span_reread"
    PRINT_TRUNCATION = "print_truncation"
    KERNEL_FAILURE = "kernel_failure"
    CONTEXT_UNFIT = "context_unfit"
    EVICTION_NET_LOSS = "eviction_net_loss"
    SPANS_PRUNED = "spans_pruned"
    # The trajectory lint (scroll_core.lint), run on each finished turn; its re_reading rule
    # is live as SPAN_REREAD.
    LINT_WINDOW_REFILL = "lint_window_refill"
    LINT_HEAD_AND_TAIL = "lint_head_and_tail"
    LINT_UNDERCOUNTING_FILTER = "lint_undercounting_filter"
    LINT_NO_DISCONFIRMING_QUERY = "lint_no_disconfirming_query"
    LINT_ARCHIVE_ANSWERED = "lint_archive_answered"
    KIND_CHOICES = [
        (INDEX_GAP, "Index gap (the blocks no longer tile the evicted range)"),
        (HEADLINE_QUALITY, "Headline quality falling (missing, malformed, duplicate)"),
        (SPAN_REREAD, "Evicted span re-read instead of computed in the kernel"),
        (PRINT_TRUNCATION, "Repeated print-cap truncation"),
        (KERNEL_FAILURE, "Kernel crash or timeout"),
        (CONTEXT_UNFIT, "Context window unfit"),
        (EVICTION_NET_LOSS, "Evicted span re-read past its cost (a net loss under a prefix cache)"),
        (SPANS_PRUNED, "Stored spans pruned to stay under SCROLL_SPAN_RETENTION_BYTES"),
        (LINT_WINDOW_REFILL, "Lint: a query run again after the print cap cut it"),
        (LINT_HEAD_AND_TAIL, "Lint: only the head and tail of a long session read"),
        (LINT_UNDERCOUNTING_FILTER, "Lint: a search filter hid evidence that ranks as well"),
        (LINT_NO_DISCONFIRMING_QUERY, "Lint: answered from old evidence, nothing searched after"),
        (LINT_ARCHIVE_ANSWERED, "Lint: the reply answers the archive, not the live turn"),
    ]

    kind = models.CharField(max_length=32, choices=KIND_CHOICES, unique=True)
    threshold = models.PositiveIntegerField(
        default=1, help_text="How many occurrences (within the window) raise the alert."
    )
    window = models.PositiveIntegerField(
        "window (spans)",
        default=10,
        help_text="Recent relevant spans of a session considered (0: all).",
    )
    enabled = models.BooleanField(default=True)

    class Meta:
        db_table = "dashboard_alertrule"
        ordering = ["kind"]

    def __str__(self) -> str:
        return self.get_kind_display()


class Alert(models.Model):
    """One raised alert; repeated triggers bump ``count`` instead of opening another."""

    OPEN, ACKNOWLEDGED, RESOLVED = "open", "acknowledged", "resolved"
    STATE_CHOICES = [(s, s) for s in (OPEN, ACKNOWLEDGED, RESOLVED)]

    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE, related_name="alerts")
    session_id = models.CharField(max_length=200, blank=True, db_index=True)
    key = models.CharField(max_length=200, blank=True)  # e.g. the re-read block
    message = models.TextField()
    state = models.CharField(max_length=16, choices=STATE_CHOICES, default=OPEN)
    count = models.PositiveIntegerField(default=1)
    first_seen = models.DateTimeField(default=timezone.now)
    last_seen = models.DateTimeField(default=timezone.now)
    span_id = models.CharField(max_length=16, blank=True)  # the span that last triggered it
    acknowledged_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    resolved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "dashboard_alert"
        ordering = ["-last_seen", "-id"]
        indexes = [models.Index(fields=["state", "-last_seen"])]
        # Several processes evaluate rules at once: the database keeps one open alert per
        # rule and subject (raise_alert bumps it when its insert loses the race).
        constraints = [
            models.UniqueConstraint(
                fields=["rule", "session_id", "key"],
                condition=Q(state="open"),
                name="one_open_alert_per_rule_and_subject",
            )
        ]

    def __str__(self) -> str:
        return f"{self.rule.kind} {self.session_id} ({self.state})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.pk,
            "kind": self.rule.kind,
            "title": self.rule.get_kind_display(),
            "session_id": self.session_id,
            "key": self.key,
            "message": self.message,
            "state": self.state,
            "count": self.count,
            "first_seen": self.first_seen.isoformat(),
            "last_seen": self.last_seen.isoformat(),
            "span_id": self.span_id or None,
            "acknowledged_by": (
                self.acknowledged_by.get_username() if self.acknowledged_by else None
            ),
            "acknowledged_at": self.acknowledged_at.isoformat() if self.acknowledged_at else None,
            "resolved_at": self.resolved_at.isoformat() if self.resolved_at else None,
        }


class ModelPrice(models.Model):
    """What one model costs, per million tokens: fresh input, cached input (read from the
    provider's prompt cache), cache writes, output. A row overrides genai-prices' default
    price for its model (``scroll_core.pricing``).

    A call's cost: its uncached prompt tokens at ``input``, the prompt tokens a prefix cache
    serves (the provider's count, else the part of the view unchanged since the call before)
    at ``cached_input``, the tokens it wrote to the cache at ``cache_write`` (blank: at
    ``input``), and its output at ``output``. Models with neither a row nor a default price
    show no cost.
    """

    model = models.CharField(
        max_length=200, unique=True, help_text="The model name as runs record it, e.g. gpt-4o."
    )
    input_per_mtok = models.DecimalField(
        "input per 1M tokens", max_digits=12, decimal_places=4, default=0,
        validators=[MinValueValidator(0)],
    )  # fmt: skip
    cached_input_per_mtok = models.DecimalField(
        "cached input per 1M tokens", max_digits=12, decimal_places=4, default=0,
        validators=[MinValueValidator(0)],
    )  # fmt: skip
    cache_write_per_mtok = models.DecimalField(
        "cache write per 1M tokens", max_digits=12, decimal_places=4, null=True, blank=True,
        validators=[MinValueValidator(0)],
        help_text="Tokens written to the prompt cache (Anthropic bills them above the input "
        "price). Blank: at the input price.",
    )  # fmt: skip
    output_per_mtok = models.DecimalField(
        "output per 1M tokens", max_digits=12, decimal_places=4, default=0,
        validators=[MinValueValidator(0)],
    )  # fmt: skip
    currency = models.CharField(max_length=8, default="USD")

    class Meta:
        db_table = "dashboard_modelprice"
        ordering = ["model"]
        verbose_name = "model price"

    def __str__(self) -> str:
        return f"{self.model} ({self.currency})"

    def rates(self) -> Rates:
        """This row as the rates ``scroll_core.pricing`` prices a call at (source "admin")."""
        return Rates(
            input_per_mtok=self.input_per_mtok,
            cache_read_per_mtok=self.cached_input_per_mtok,
            output_per_mtok=self.output_per_mtok,
            cache_write_per_mtok=self.cache_write_per_mtok,
            currency=self.currency,
            source=ADMIN_SOURCE,
        )
