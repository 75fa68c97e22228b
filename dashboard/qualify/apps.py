from __future__ import annotations

from django.apps import AppConfig


class QualifyConfig(AppConfig):
    name = "dashboard.qualify"
    label = "qualify"
    verbose_name = "Model qualification"
    default_auto_field = "django.db.models.BigAutoField"
