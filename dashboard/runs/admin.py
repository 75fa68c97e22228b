"""Admin: tuning profiles (validated and audited), cross-agent grants and the records of runs."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db import transaction
from django.http import HttpRequest

from dashboard.readonly_admin import ReadOnlyAdmin
from dashboard.runs import profiles
from dashboard.runs.models import (
    PROFILE_FIELDS,
    AgentGrant,
    CompressEvent,
    KernelAction,
    ProfileChange,
    RunRecord,
    TuningProfile,
)
from scroll_core.profile import MAX_CONTEXT_SIZE, MIN_CONTEXT_SIZE, UPPER_BOUNDS


class ProfileChangeInline(admin.TabularInline):
    model = ProfileChange
    extra = 0
    can_delete = False
    fields = ("changed_at", "changed_by", "field", "old_value", "new_value")
    readonly_fields = fields
    ordering = ("-changed_at", "-id")

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


# (min, max) of each knob's input, from scroll_core.profile (None: no bound that way).
PROFILE_INPUT_BOUNDS: dict[str, tuple[float | None, float | None]] = {
    name: (None, bound) for name, bound in UPPER_BOUNDS.items()
} | {
    "context_size": (MIN_CONTEXT_SIZE, MAX_CONTEXT_SIZE),
    "trigger_cap_tokens": (1, MAX_CONTEXT_SIZE),
    "tail_cap_tokens": (0, MAX_CONTEXT_SIZE),
    "tail_floor_tokens": (0, MAX_CONTEXT_SIZE),
    "protected_recent_tool_results": (0, UPPER_BOUNDS["protected_recent_tool_results"]),
    "pre_trim_min_chars": (0, UPPER_BOUNDS["pre_trim_min_chars"]),
    "tier_cap": (2, UPPER_BOUNDS["tier_cap"]),
    "print_cap": (1, UPPER_BOUNDS["print_cap"]),
    "output_reserve_cap": (1, UPPER_BOUNDS["output_reserve_cap"]),
    "exec_timeout_s": (0, UPPER_BOUNDS["exec_timeout_s"]),
    "trigger_ratio": (0, 1),
    "reserve_ratio": (0, 1),
    "tail_floor_ratio": (0, 1),
    "index_budget_ratio": (0, 1),
    "output_reserve_ratio": (0, 1),
}


def tier_cap_help(cap: int) -> str:
    """What ``tier_cap`` does at ``cap`` (scroll_core/index.py): the help text in admin."""
    return (
        f"Blocks per index tier: when a tier reaches {cap} blocks it keeps its newest and "
        f"folds the other {cap - 1} into one block a tier up."
    )


@admin.register(TuningProfile)
class TuningProfileAdmin(admin.ModelAdmin):
    list_display = ("name", "context_size", "trigger_ratio", "tier_cap", "print_cap", "updated_at")
    search_fields = ("name", "description")
    fieldsets: list[tuple[str | None, dict[str, Any]]] = [
        (None, {"fields": ("name", "description")}),
        (
            "Window and trigger",
            {"fields": ("context_size", "trigger_ratio", "trigger_cap_tokens")},
        ),
        (
            "Protected tail",
            {
                "fields": (
                    "reserve_ratio",
                    "tail_cap_tokens",
                    "tail_floor_tokens",
                    "tail_floor_ratio",
                )
            },
        ),
        (
            "Folding and the index",
            {
                "fields": (
                    "protected_recent_tool_results",
                    "pre_trim_min_chars",
                    "tier_cap",
                    "index_budget_ratio",
                )
            },
        ),
        (
            "Kernel and output",
            {
                "fields": (
                    "print_cap",
                    "exec_timeout_s",
                    "output_reserve_cap",
                    "output_reserve_ratio",
                )
            },
        ),
    ]
    inlines = [ProfileChangeInline]

    def formfield_for_dbfield(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        # The core Profile's bounds as the browser's min/max, so a slip is caught on input.
        field = super().formfield_for_dbfield(db_field, request, **kwargs)
        bounds = PROFILE_INPUT_BOUNDS.get(db_field.name)
        if field is not None and bounds is not None:
            low, high = bounds
            if low is not None:
                field.widget.attrs["min"] = low
            if high is not None:
                field.widget.attrs["max"] = high
        return field

    def get_form(self, request: HttpRequest, obj: Any = None, **kwargs: Any) -> Any:
        form = super().get_form(request, obj, **kwargs)
        # The help text says what the value in the box does, whatever it is.
        cap = obj.tier_cap if obj is not None else TuningProfile._meta.get_field("tier_cap").default
        if "tier_cap" in form.base_fields:
            form.base_fields["tier_cap"].help_text = tier_cap_help(cap)
        return form

    def save_model(self, request: HttpRequest, obj: TuningProfile, form: Any, change: bool) -> None:
        # The form already ran clean() (the core Profile accepted these values).
        with transaction.atomic():
            before = profiles.snapshot(obj) if change else {}
            super().save_model(request, obj, form, change)
            changed = profiles.record_changes(obj, before, request.user)
        if change and changed:
            names = ", ".join(c.field for c in changed)
            self.message_user(
                request,
                f"Changed {names}; live sessions on this profile apply it at their next compress.",
                messages.INFO,
            )


assert set(PROFILE_FIELDS) <= {
    name for _, opts in TuningProfileAdmin.fieldsets for name in opts["fields"]
}, "every Profile knob must be editable in admin"


@admin.register(ProfileChange)
class ProfileChangeAdmin(ReadOnlyAdmin):
    list_display = ("changed_at", "profile", "field", "old_value", "new_value", "changed_by")
    list_filter = ("profile", "field")


@admin.register(KernelAction)
class KernelActionAdmin(ReadOnlyAdmin):
    list_display = ("at", "session_id", "action", "operator", "done", "detail")
    list_filter = ("action", "done")
    search_fields = ("session_id", "operator")


@admin.register(RunRecord)
class RunRecordAdmin(ReadOnlyAdmin):
    list_display = (
        "session_id", "agent_id", "kind", "status", "model_name", "profile", "task_code",
        "steps", "created_at",
    )  # fmt: skip
    list_filter = ("status", "kind", "task_code")
    search_fields = ("session_id", "agent_id", "task")


@admin.register(CompressEvent)
class CompressEventAdmin(ReadOnlyAdmin):
    list_display = ("session_id", "turn", "step", "action", "tokens_before", "tokens_after")
    list_filter = ("action",)
    search_fields = ("session_id",)


@admin.register(AgentGrant)
class AgentGrantAdmin(admin.ModelAdmin):
    """Grants are given (add) and revoked (action), never edited or deleted: the rows are
    their own audit trail, with who and when for both."""

    list_display = (
        "reader_agent",
        "readable_agent",
        "granted_by",
        "granted_at",
        "revoked_by",
        "revoked_at",
        "reason",
    )
    list_filter = ("revoked_at",)
    search_fields = ("reader_agent", "readable_agent", "reason")
    actions = ["revoke"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        audit = ("granted_by", "granted_at", "revoked_by", "revoked_at")
        if obj is None:
            return audit
        return ("reader_agent", "readable_agent", "reason", *audit)

    def get_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        if obj is None:
            return ["reader_agent", "readable_agent", "reason"]
        return [
            "reader_agent",
            "readable_agent",
            "reason",
            "granted_by",
            "granted_at",
            "revoked_by",
            "revoked_at",
        ]

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def save_model(self, request: HttpRequest, obj: AgentGrant, form: Any, change: bool) -> None:
        if not change:
            obj.granted_by = request.user if request.user.is_authenticated else None
        super().save_model(request, obj, form, change)

    @admin.action(description="Revoke the selected grants", permissions=["change"])
    def revoke(self, request: HttpRequest, queryset: Any) -> None:
        revoked = 0
        for grant in queryset.filter(revoked_at=None):
            if grant.revoke(request.user):
                revoked += 1
                self.log_change(request, grant, "Revoked")
        self.message_user(request, f"Revoked {revoked} grant(s).", messages.SUCCESS)
