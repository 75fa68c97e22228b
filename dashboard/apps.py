from __future__ import annotations

from django.apps import AppConfig


class DashboardConfig(AppConfig):
    name = "dashboard"
    verbose_name = "Scroll console"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Registers the receiver that closes the Event Log when tests move its path.
        from dashboard import eventlog  # noqa: F401
