from __future__ import annotations

from django.apps import AppConfig


class GatewayConfig(AppConfig):
    name = "dashboard.gateway"
    label = "gateway"
    verbose_name = "Gateway"
    default_auto_field = "django.db.models.BigAutoField"
