"""Admin: scorecards (read-only: they come from the suite), the profiles that require
qualified models, and the gate's audit trail (read-only)."""

from __future__ import annotations

from django.contrib import admin

from dashboard.readonly_admin import ReadOnlyAdmin

from .models import GateDecision, Qualification, QualificationRequirement


@admin.register(Qualification)
class QualificationAdmin(ReadOnlyAdmin):
    list_display = ("id", "model_name", "api", "suite_version", "status", "total", "passed",
                    "created_at")  # fmt: skip
    list_filter = ("status", "passed", "api", "suite_version")


@admin.register(QualificationRequirement)
class QualificationRequirementAdmin(admin.ModelAdmin):
    list_display = ("profile", "mode")


@admin.register(GateDecision)
class GateDecisionAdmin(ReadOnlyAdmin):
    list_display = ("at", "user", "profile", "subject", "api", "missing", "outcome")
    list_filter = ("outcome", "mode")
