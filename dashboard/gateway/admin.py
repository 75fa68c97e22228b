"""Admin for gateway keys: created here, the key shown once, only its hash kept."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db import models
from django.http import HttpRequest

from dashboard.gateway.models import GatewayKey
from dashboard.limits import BoundedJSONField


@admin.register(GatewayKey)
class GatewayKeyAdmin(admin.ModelAdmin):
    list_display = (
        "agent_id",
        "project",
        "name",
        "prefix",
        "upstream_format",
        "upstream_base_url",
        "profile",
        "active",
        "requests",
        "tokens_used",
        "last_used_at",
    )
    # model_map: a length cap and a form error, not a 500, for JSON nested too deep.
    formfield_overrides = {models.JSONField: {"form_class": BoundedJSONField}}
    list_filter = ("project", "active", "upstream_format")
    search_fields = ("agent_id", "name", "prefix")
    readonly_fields = ("prefix", "tokens_used", "requests", "created_at", "last_used_at")
    fields = (
        "agent_id",
        "project",
        "name",
        "active",
        "profile",
        "upstream_format",
        "upstream_base_url",
        "upstream_key_env",
        "model_map",
        "upstream_timeout_s",
        "max_recall_steps",
        "rate_limit_per_minute",
        "token_budget",
        *readonly_fields,
    )

    def formfield_for_dbfield(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name == "upstream_base_url":
            kwargs["assume_scheme"] = "https"  # a URL typed without a scheme
        return super().formfield_for_dbfield(db_field, request, **kwargs)

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        secret = None if change else obj.set_new_key()
        super().save_model(request, obj, form, change)
        if secret is not None:
            messages.warning(
                request,
                f"The key for agent {obj.agent_id} is {secret} - copy it now: it is shown "
                "only this once (Scroll keeps only its hash).",
            )
