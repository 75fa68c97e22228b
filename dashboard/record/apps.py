from __future__ import annotations

from django.apps import AppConfig


class RecordConfig(AppConfig):
    name = "dashboard.record"
    label = "record"
    verbose_name = "Call record"
    default_auto_field = "django.db.models.BigAutoField"
