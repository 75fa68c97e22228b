"""The permissions migration: staff users of the day join the Operators group, viewers do not,
and runs recorded before it keep the agent they ran as."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

pytestmark = pytest.mark.django_db(transaction=True)


def _permissions_migration(executor: MigrationExecutor) -> tuple[tuple[str, str], tuple[str, str]]:
    """(the migration adding the permissions, the dashboard migration before it)."""
    graph = executor.loader.graph
    key = next(k for k in graph.nodes if k[0] == "dashboard" and k[1].endswith("_permissions"))
    parent = next(p.key for p in graph.node_map[key].parents if p.key[0] == "dashboard")
    return key, parent


def test_existing_staff_join_operators_and_viewers_do_not(django_user_model):
    executor = MigrationExecutor(connection)
    _, before = _permissions_migration(executor)
    executor.migrate([before])

    old_run = executor.loader.project_state([before]).apps.get_model("dashboard", "RunRecord")
    old_run.objects.create(session_id="task:old", task="t", model_name="m")
    staff = django_user_model.objects.create_user("staff", password="pw-s-123456", is_staff=True)
    viewer = django_user_model.objects.create_user("viewer", password="pw-v-123456")

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())

    staff = django_user_model.objects.get(pk=staff.pk)
    viewer = django_user_model.objects.get(pk=viewer.pk)
    assert list(staff.groups.values_list("name", flat=True)) == ["Operators"]
    assert staff.has_perm("runs.start_run") and staff.has_perm("runs.run_task_code")
    assert not viewer.groups.exists() and not viewer.has_perm("runs.start_run")
    from dashboard.runs.models import RunRecord

    old = RunRecord.objects.get(session_id="task:old")
    assert (old.agent_id, old.task_code) == ("main", True)
