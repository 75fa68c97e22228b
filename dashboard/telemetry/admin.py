"""Admin: alert rules and alerts, model prices and the persisted spans."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from dashboard.readonly_admin import ReadOnlyAdmin
from dashboard.telemetry.models import Alert, AlertRule, ModelPrice, SpanRecord


@admin.register(AlertRule)
class AlertRuleAdmin(admin.ModelAdmin):
    list_display = ("kind", "threshold", "window", "enabled")
    list_editable = ("threshold", "window", "enabled")

    def formfield_for_dbfield(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        field = super().formfield_for_dbfield(db_field, request, **kwargs)
        if field is not None and db_field.name == "window":
            # The unit is spans (the rule's relevant spans of one session), not time; the
            # label and the changelist header come from the field's verbose name.
            field.help_text = "The newest N relevant spans of a session counted, in spans (0: all)."
            field.widget.attrs.update({"min": 0, "title": "in spans, 0 = all"})
        if field is not None and db_field.name == "threshold":
            field.widget.attrs["min"] = 1
        return field

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # one seeded rule per kind


@admin.register(ModelPrice)
class ModelPriceAdmin(admin.ModelAdmin):
    """Prices per million tokens; each call, session and agent shows its cost from these, and
    from genai-prices' defaults for a model without a row."""

    list_display = (
        "model", "input_per_mtok", "cached_input_per_mtok", "cache_write_per_mtok",
        "output_per_mtok", "currency",
    )  # fmt: skip
    list_editable = (
        "input_per_mtok", "cached_input_per_mtok", "cache_write_per_mtok", "output_per_mtok"
    )  # fmt: skip
    search_fields = ("model",)


@admin.register(Alert)
class AlertAdmin(admin.ModelAdmin):
    list_display = ("last_seen", "rule", "session_id", "state", "count", "message")
    list_filter = ("state", "rule")
    search_fields = ("session_id", "message")
    readonly_fields = (
        "rule",
        "session_id",
        "key",
        "message",
        "count",
        "first_seen",
        "last_seen",
        "span_id",
        "acknowledged_by",
        "acknowledged_at",
        "resolved_at",
    )
    actions = ["acknowledge", "resolve"]

    @admin.action(description="Acknowledge selected alerts")
    def acknowledge(self, request: HttpRequest, queryset: Any) -> None:
        from dashboard.telemetry.alerts import acknowledge

        for alert in queryset.filter(state=Alert.OPEN):
            acknowledge(alert, request.user)

    @admin.action(description="Resolve selected alerts")
    def resolve(self, request: HttpRequest, queryset: Any) -> None:
        from dashboard.telemetry.alerts import resolve

        for alert in queryset.exclude(state=Alert.RESOLVED):
            resolve(alert, request.user)


@admin.register(SpanRecord)
class SpanRecordAdmin(ReadOnlyAdmin):
    list_display = ("name", "session_id", "status", "duration_ms", "span_id")
    list_filter = ("status",)
    search_fields = ("name", "session_id", "trace_id")
