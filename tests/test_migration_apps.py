"""Upgrading a database made before the console was split into apps: every row of every table
is still there afterwards, read through the new apps' models, and permissions, group
memberships and admin log entries still point at the same rows."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection, models
from django.db.migrations.executor import MigrationExecutor

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = ("dashboard", "0016_stored_conversations")
# Every model the console had before the split, by the app that owns it now.
MOVED = {
    "runs": (
        "AgentGrant", "CompressEvent", "ConsoleMarker", "KernelState", "ProfileChange",
        "RunRecord", "SessionIndex", "TuningProfile", "WorkerCommand",
    ),
    "telemetry": ("Alert", "AlertRule", "ModelPrice", "SpanRecord"),
    "gateway": ("GatewayKey", "StoredConversation", "StoredResponse"),
}  # fmt: skip
_counter = itertools.count(1)


def _value(field: models.Field, made: dict[str, Any]) -> Any:
    """A valid value for a required field of a historical model."""
    n = next(_counter)
    if field.choices:
        return field.choices[0][0]
    if isinstance(field, models.ForeignKey):
        return made[field.related_model._meta.model_name]
    if isinstance(field, models.JSONField):
        return {"n": n}
    if isinstance(field, models.DateTimeField):
        return datetime(2026, 1, 1, tzinfo=UTC)
    if isinstance(field, models.DecimalField):
        return Decimal("1.5")
    if isinstance(field, models.BooleanField):
        return True
    if isinstance(field, models.IntegerField | models.FloatField):
        return n
    return f"v{n}"[: field.max_length or 40]


def _fill(model: type[models.Model], made: dict[str, Any]) -> models.Model:
    existing = model.objects.order_by("pk").first()  # seeded by a migration (alert rules...)
    if existing is not None:
        return existing
    values = {}
    for field in model._meta.concrete_fields:
        if field.primary_key or field.has_default() or field.null:
            continue
        values[field.name] = _value(field, made)
    return model.objects.create(**values)


def _old_rows(old_apps: Any, user: Any) -> dict[str, int]:
    """A row in every table of the old app (parents first), made unless a migration seeded
    one; their ids by model."""
    made: dict[str, Any] = {"user": old_apps.get_model("auth", "User").objects.get(pk=user.pk)}
    pending = [m for m in old_apps.get_app_config("dashboard").get_models()]
    assert {m.__name__ for m in pending} == {n for names in MOVED.values() for n in names}
    while pending:
        for model in list(pending):
            parents = {
                f.related_model._meta.model_name
                for f in model._meta.concrete_fields
                if isinstance(f, models.ForeignKey) and not f.null
            }
            if parents <= set(made):
                made[model._meta.model_name] = _fill(model, made)
                pending.remove(model)
    return {name: made[name.lower()].pk for names in MOVED.values() for name in names}


def test_an_upgrade_to_the_apps_keeps_every_row_permission_and_log_entry(django_user_model):
    from django.contrib.admin.models import LogEntry
    from django.contrib.auth.models import Group
    from django.contrib.contenttypes.models import ContentType

    # The database as the console left it before the split: dashboard's migrations to 0016,
    # none of the apps' (unapplying them drops what they added since, e.g. a column).
    executor = MigrationExecutor(connection)
    executor.migrate([BEFORE, *((app, None) for app in MOVED)])
    old_apps = executor.loader.project_state([BEFORE]).apps

    user = django_user_model.objects.create_user("op", password="pw-op-123456", is_staff=True)
    ids = _old_rows(old_apps, user)
    # Every row's pk by model: later migrations may seed more rows (an alert rule), never lose one.
    before = {
        name: set(old_apps.get_model("dashboard", name).objects.values_list("pk", flat=True))
        for names in MOVED.values()
        for name in names
    }
    old_run_type = ContentType.objects.get(app_label="dashboard", model="runrecord")
    viewers = Group.objects.create(name="Run viewers")
    viewers.permissions.add(old_run_type.permission_set.get(codename="stop_run"))
    user.groups.add(viewers)
    LogEntry.objects.create(
        user_id=user.pk,
        content_type_id=old_run_type.pk,
        object_id=str(ids["RunRecord"]),
        object_repr="run",
        action_flag=1,
    )

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())

    from django.apps import apps

    for app, names in MOVED.items():
        for name in names:
            model = apps.get_model(app, name)
            kept = set(model.objects.filter(pk__in=before[name]).values_list("pk", flat=True))
            assert kept == before[name], name
            assert ids[name] in kept, name
    assert not ContentType.objects.filter(
        app_label="dashboard", model__in=[n.lower() for names in MOVED.values() for n in names]
    ).exists()
    user = django_user_model.objects.get(pk=user.pk)
    assert user.has_perm("runs.stop_run") and not user.has_perm("runs.start_run")
    entry = LogEntry.objects.get(user_id=user.pk)
    assert entry.get_edited_object().pk == ids["RunRecord"]
    assert entry.content_type.app_label == "runs"
