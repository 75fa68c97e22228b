"""Who may run code: the console's permissions and the decorator its views use.

Starting and stopping runs, restarting or stopping kernels, having a run execute the task's
own fenced code and saving profiles from the replay lab are Django permissions
(``RunRecord.Meta.permissions``, ``TuningProfile.Meta.permissions``), not a login. Superusers
hold them all; migration 0003 gives them to the "Operators" group and puts the staff users of
the day in it. An operator grants them in admin: Users > the user > Groups "Operators" (or
single permissions under "User permissions").

A logged-in user without the permission gets a 403 whose page says which permission is
missing and how to get it; the pages hide the controls from them in the first place.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse

__all__ = [
    "CONTROL_KERNEL",
    "OPERATORS_GROUP",
    "RUN_TASK_CODE",
    "SAVE_PROFILE",
    "START_RUN",
    "STOP_RUN",
    "denied",
    "ensure_operators_group",
    "permission_required",
]

START_RUN = "runs.start_run"
STOP_RUN = "runs.stop_run"
CONTROL_KERNEL = "runs.control_kernel"
RUN_TASK_CODE = "runs.run_task_code"
SAVE_PROFILE = "runs.save_profile_from_replay"
OPERATORS_GROUP = "Operators"

# Every permission the Operators group holds (codenames of the dashboard app).
OPERATOR_CODENAMES = (
    "start_run",
    "stop_run",
    "control_kernel",
    "run_task_code",
    "save_profile_from_replay",
)

View = Callable[..., HttpResponse]


def ensure_operators_group(*, apps: Any = None, using: str = "default", **_: Any) -> None:
    """Make sure the Operators group exists and holds every console permission.

    Connected to ``post_migrate`` for this app (after auth has created the permissions), so a
    fresh database, a flushed one and an upgraded one all have it. Members are not touched.
    """
    if apps is None:
        from django.apps import apps as installed_apps

        apps = installed_apps
    group_model = apps.get_model("auth", "Group")
    permission_model = apps.get_model("auth", "Permission")
    group, _ = group_model.objects.using(using).get_or_create(name=OPERATORS_GROUP)
    group.permissions.add(
        *permission_model.objects.using(using).filter(
            content_type__app_label="runs", codename__in=OPERATOR_CODENAMES
        )
    )


def denied(perm: str, action: str) -> PermissionDenied:
    """The 403 for a user lacking ``perm``; its text is shown on the 403 page."""
    return PermissionDenied(
        f"You may not {action}: that needs the permission {perm!r}. An operator grants it in "
        f"admin by adding you to the {OPERATORS_GROUP!r} group."
    )


def permission_required(perm: str, action: str) -> Callable[[View], View]:
    """Refuse with a clear 403 unless the (logged-in) user holds ``perm``.

    Stack it under ``login_required``, so anonymous visitors still go to the login page.
    """

    def decorate(view: View) -> View:
        @functools.wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not request.user.has_perm(perm):
                raise denied(perm, action)
            return view(request, *args, **kwargs)

        return wrapper

    return decorate
