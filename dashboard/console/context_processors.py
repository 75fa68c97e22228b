"""Template context every page gets: the open-alert count shown in the header."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from dashboard.console import live
from dashboard.projects.access import access_of


def console(request: HttpRequest) -> dict[str, Any]:
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {"open_alerts": 0}
    return {"open_alerts": live.open_alert_count(access_of(request))}
