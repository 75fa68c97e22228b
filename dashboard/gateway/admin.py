"""Admin for gateway keys: created here, the key shown once, only its hash kept."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db import models
from django.http import HttpRequest

from dashboard.gateway.models import GatewayKey
from dashboard.limits import BoundedJSONField
from dashboard.qualify import gate


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

    def get_form(self, request: HttpRequest, obj: Any = None, **kwargs: Any) -> Any:
        base = super().get_form(request, obj, **kwargs)

        class GatedForm(base):  # type: ignore[misc, valid-type]
            """Refuses a change of the key's models that its profile's gate refuses."""

            def clean(self) -> dict[str, Any]:
                data: dict[str, Any] = super().clean()
                self.gate_verdict = None
                mapping = data.get("model_map")
                if obj is not None and (
                    data.get("profile") == obj.profile
                    and data.get("upstream_format") == obj.upstream_format
                    and mapping == obj.model_map
                ):
                    return data  # its models are unchanged: nothing for the gate to judge
                models = mapping.values() if isinstance(mapping, dict) else ()
                verdict = gate.evaluate(
                    data.get("profile"), [str(m) for m in models], data.get("upstream_format", "")
                )
                subject = f"gateway key {data.get('agent_id') or (obj and obj.agent_id)}"
                if verdict.refused:
                    gate.record(verdict, subject=subject, user=request.user)
                    raise ValidationError(verdict.message)
                self.gate_verdict = (verdict, subject)
                return data

        return GatedForm

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        secret = None if change else obj.set_new_key()
        super().save_model(request, obj, form, change)
        gated = getattr(form, "gate_verdict", None)
        if gated is not None:
            verdict, subject = gated
            if gate.record(verdict, subject=subject, user=request.user) and verdict.missing:
                messages.warning(request, f"Saved with a warning: {verdict.message}")
        if secret is not None:
            messages.warning(
                request,
                f"The key for agent {obj.agent_id} is {secret} - copy it now: it is shown "
                "only this once (Scroll keeps only its hash).",
            )
