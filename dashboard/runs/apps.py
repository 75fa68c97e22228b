from __future__ import annotations

from django.apps import AppConfig
from django.db.models.signals import post_migrate


class RunsConfig(AppConfig):
    name = "dashboard.runs"
    label = "runs"
    verbose_name = "Runs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from dashboard.runs.permissions import ensure_operators_group

        # Every migrate (and every test flush) leaves the Operators group with its permissions;
        # sent for this app, after auth has made the permissions of its models.
        post_migrate.connect(ensure_operators_group, sender=self, dispatch_uid="scroll-operators")
