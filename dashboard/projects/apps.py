from __future__ import annotations

from django.apps import AppConfig


class ProjectsConfig(AppConfig):
    name = "dashboard.projects"
    label = "projects"
    verbose_name = "Projects"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from dashboard.projects.grants import same_project
        from dashboard.runs.grants import narrow_grants_with

        narrow_grants_with(same_project)
