from __future__ import annotations

from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    name = "dashboard.console"
    label = "console"
    verbose_name = "Console"
    default_auto_field = "django.db.models.BigAutoField"
