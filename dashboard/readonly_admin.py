"""An admin for records the console writes: browsable, never edited by hand. Shared by the
apps' admins (runs, telemetry)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

__all__ = ["ReadOnlyAdmin"]


class ReadOnlyAdmin(admin.ModelAdmin):
    """Records the console writes: browsable, never edited by hand."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
