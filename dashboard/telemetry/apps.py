from __future__ import annotations

from django.apps import AppConfig


class TelemetryConfig(AppConfig):
    name = "dashboard.telemetry"
    label = "telemetry"
    verbose_name = "Telemetry"
    default_auto_field = "django.db.models.BigAutoField"
