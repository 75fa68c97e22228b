"""Gateway keys belong to a project (issue 31): a key reaches only its own project's agents,
through the real gateway (daphne on loopback, the official openai client)."""

from __future__ import annotations

import openai
import pytest
from django.core.exceptions import ValidationError
from gateway_clients import ask, make_key, oa

from dashboard.gateway.models import GatewayKey
from dashboard.projects.models import AgentOwner, Project, default_project_id
from dashboard.runs.grants import AgentGrant, readable_by

pytestmark = pytest.mark.django_db(transaction=True)

HELLO = [{"role": "user", "content": "hello"}]


@pytest.fixture
def projects():
    return Project.objects.create(name="Alpha team"), Project.objects.create(name="Bravo team")


def test_a_new_key_puts_its_agent_in_its_project_and_defaults_to_the_default_one(projects):
    a, _ = projects
    GatewayKey.issue(agent_id="alpha", project=a, upstream_base_url="http://127.0.0.1:9/v1")
    assert AgentOwner.objects.get(agent_id="alpha").project == a
    key, _ = GatewayKey.issue(agent_id="plain", upstream_base_url="http://127.0.0.1:9/v1")
    assert key.project_id == default_project_id()
    assert AgentOwner.objects.get(agent_id="plain").project_id == default_project_id()


def test_a_key_of_project_a_cannot_be_made_for_project_bs_agent(projects):
    a, b = projects
    AgentOwner.objects.create(agent_id="bravo", project=b)
    with pytest.raises(ValidationError) as caught:
        GatewayKey.issue(agent_id="bravo", project=a, upstream_base_url="http://127.0.0.1:9/v1")
    assert "belongs to another project" in str(caught.value.message_dict["project"])
    assert not GatewayKey.objects.filter(agent_id="bravo").exists()


def test_a_key_stops_reaching_its_agent_once_the_agent_moves_to_another_project(
    gateway, upstream, projects
):
    a, b = projects
    key = make_key(upstream, agent="alpha", project=a)
    assert ask(oa(gateway, key), HELLO).choices[0].message.content
    # An admin moves the agent to project B: the key of project A no longer reaches it.
    AgentOwner.objects.filter(agent_id="alpha").update(project=b)
    AgentOwner.objects.get(agent_id="alpha").save()  # the signal admin's save sends
    sent = len(upstream.requests)
    with pytest.raises(openai.AuthenticationError):
        ask(oa(gateway, key), HELLO)
    assert len(upstream.requests) == sent  # refused before any upstream call
    AgentOwner.objects.filter(agent_id="alpha").update(project=a)
    AgentOwner.objects.get(agent_id="alpha").save()
    assert ask(oa(gateway, key), HELLO).choices[0].message.content


def test_a_cross_agent_grant_never_reaches_into_another_project(projects):
    a, b = projects
    AgentOwner.objects.create(agent_id="alpha", project=a)
    AgentOwner.objects.create(agent_id="alpha-helper", project=a)
    AgentOwner.objects.create(agent_id="bravo", project=b)
    for other in ("alpha-helper", "bravo"):
        AgentGrant.objects.create(reader_agent="alpha", readable_agent=other, reason="test")
    # The run worker and the gateway both ask readable_by.
    assert readable_by("alpha") == {"alpha-helper"}
