"""Cross-agent grants: given and revoked in admin by staff, audited, shown on the session
page, and what ``ms`` reads follows them at its next call."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry
from django.urls import reverse

from dashboard.runs.grants import AgentGrant, readable_by
from scroll_core.kernel.ms import MsCapability

SECRET = "api key is sk-granted-5e7a"


@pytest.fixture
def agents(console_store):
    """Two agents' sessions in the console's log, on SQLite and on PostgreSQL: a grant opens
    and a revoke closes the boundary on both."""
    console_store.append(session_id="sess-a", agent_id="alpha", kind="context_msg", content="hi")
    console_store.append(session_id="sess-b", agent_id="bravo", kind="context_msg", content=SECRET)
    return console_store


def _grant(admin_client, **form):
    data = {"reader_agent": "alpha", "readable_agent": "bravo", "reason": "incident review"}
    data.update(form)
    return admin_client.post(reverse("admin:runs_agentgrant_add"), data)


def _revoke(admin_client, grant):
    return admin_client.post(
        reverse("admin:runs_agentgrant_changelist"),
        {"action": "revoke", "_selected_action": [grant.pk]},
    )


def _contents(ms):
    return [row[0] for row in ms.sql_query("SELECT content FROM events")[0]["rows"]]


@pytest.mark.django_db
def test_reading_another_agent_is_off_by_default(agents):
    assert readable_by("alpha") == set()
    ms = MsCapability(agents, agent_id="alpha", readable_agents=readable_by)
    assert _contents(ms) == ["hi"]
    ms.close()


@pytest.mark.django_db
def test_a_grant_in_admin_opens_the_agent_and_a_revoke_closes_it_again(admin_client, agents):
    ms = MsCapability(agents, agent_id="alpha", readable_agents=readable_by)
    try:
        response = _grant(admin_client)
        assert response.status_code == 302
        grant = AgentGrant.objects.get()
        assert readable_by("alpha") == {"bravo"}
        assert SECRET in _contents(ms)
        # The grant is one way: bravo still reads only itself.
        assert readable_by("bravo") == set()

        assert _revoke(admin_client, grant).status_code == 302
        assert readable_by("alpha") == set()
        assert _contents(ms) == ["hi"]
        hits, _ = ms.search("api key", agent="*")
        assert hits == []
    finally:
        ms.close()


@pytest.mark.django_db
def test_every_grant_and_revoke_is_audited_with_who_and_when(admin_client, admin_user, agents):
    _grant(admin_client)
    grant = AgentGrant.objects.get()
    assert grant.granted_by == admin_user and grant.granted_at is not None
    assert grant.revoked_at is None and grant.live
    _revoke(admin_client, grant)
    grant.refresh_from_db()
    assert grant.revoked_by == admin_user and grant.revoked_at >= grant.granted_at
    assert LogEntry.objects.filter(object_id=str(grant.pk)).count() == 2  # added, revoked
    # A second revoke keeps the first one's who and when.
    first = grant.revoked_at
    assert grant.revoke(None) is False
    grant.refresh_from_db()
    assert grant.revoked_at == first and grant.revoked_by == admin_user


@pytest.mark.django_db
def test_grants_are_never_deleted_or_edited(admin_client, agents):
    _grant(admin_client)
    grant = AgentGrant.objects.get()
    url = reverse("admin:runs_agentgrant_delete", args=[grant.pk])
    assert admin_client.post(url, {"post": "yes"}).status_code == 403
    change = reverse("admin:runs_agentgrant_change", args=[grant.pk])
    admin_client.post(change, {"reader_agent": "x", "readable_agent": "y", "reason": "z"})
    grant.refresh_from_db()
    assert (grant.reader_agent, grant.readable_agent) == ("alpha", "bravo")


@pytest.mark.django_db
def test_admin_refuses_a_self_grant_and_a_second_live_grant(admin_client, agents):
    response = _grant(admin_client, readable_agent="alpha")
    assert response.status_code == 200 and "always reads its own" in response.content.decode()
    _grant(admin_client)
    response = _grant(admin_client)
    assert response.status_code == 200 and "already exists" in response.content.decode()
    assert AgentGrant.objects.count() == 1


@pytest.mark.django_db
def test_a_viewer_cannot_give_a_grant(client, django_user_model, agents):
    viewer = django_user_model.objects.create_user("viewer", password="pw")
    client.force_login(viewer)
    response = client.post(
        reverse("admin:runs_agentgrant_add"),
        {"reader_agent": "alpha", "readable_agent": "bravo", "reason": "x"},
    )
    assert response.status_code == 302 and "/login/" in response["Location"]
    assert not AgentGrant.objects.exists()


@pytest.mark.django_db
def test_the_session_page_shows_the_agent_and_its_grants(admin_client, agents):
    response = admin_client.get("/sessions/sess-a/")
    html = response.content.decode()
    assert "Reads agent <b>alpha</b> only (no cross-agent grant)" in html

    _grant(admin_client)
    html = admin_client.get("/sessions/sess-a/").content.decode()
    assert 'and, by grant, <b class="granted">bravo</b>' in html
    assert "incident review" in html and "grant-live" in html

    _revoke(admin_client, AgentGrant.objects.get())
    html = admin_client.get("/sessions/sess-a/").content.decode()
    assert "only (no cross-agent grant)" in html and "grant-revoked" in html
    # The reader's page lists the grant; the readable agent's page says who may read it.
    other = admin_client.get("/sessions/sess-b/").content.decode()
    assert "incident review" not in other and 'class="reader"' not in other
    _grant(admin_client, reason="second look")
    other = admin_client.get("/sessions/sess-b/").content.decode()
    assert 'readable, by grant, from agent <b class="reader">alpha</b>' in other
