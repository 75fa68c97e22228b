"""Upgrading to projects (issue 31): the migration makes one default project open to every
user, puts the agents of existing runs and gateway keys in it, and gives it every key."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("gateway", "0001_initial"), ("projects", None)]


def test_an_upgrade_puts_existing_agents_keys_and_users_in_the_default_project(
    django_user_model,
):
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    old = executor.loader.project_state([("gateway", "0001_initial")]).apps
    profile = old.get_model("runs", "TuningProfile").objects.order_by("pk").first()
    if profile is None:
        profile = old.get_model("runs", "TuningProfile").objects.create(name="p")
    old.get_model("runs", "RunRecord").objects.create(
        session_id="run:old", agent_id="run-old", task="t", profile=profile
    )
    old.get_model("gateway", "GatewayKey").objects.create(
        agent_id="support-bot", prefix="sk-scroll-abcdefgh", key_hash="0" * 64,
        upstream_base_url="http://127.0.0.1:9/v1",
    )  # fmt: skip
    veteran = django_user_model.objects.create_user("veteran", password="pw-veteran-1")

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())

    from dashboard.gateway.models import GatewayKey
    from dashboard.projects.access import Access
    from dashboard.projects.models import OPERATOR, AgentOwner, Project

    default = Project.objects.get(is_default=True)
    assert default.everyone_role == OPERATOR
    assert set(AgentOwner.objects.values_list("agent_id", "project_id")) >= {
        ("run-old", default.pk),
        ("support-bot", default.pk),
    }
    assert GatewayKey.objects.get(agent_id="support-bot").project == default
    assert Access(veteran).everything
    assert Access(veteran).sees_session("run:old", OPERATOR)
