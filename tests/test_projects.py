"""Who sees what (issue 31): a user of project A sees nothing of project B through the real
views (sessions, events, search, traces, spans, the inspector, exports, alerts, kernels, the
replay lab, the header's count) and live sockets; a viewer cannot operate; the default
project keeps a console without projects as open as before."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from channels.layers import channel_layers, get_channel_layer
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import Group
from django.test import Client
from django.utils import timezone

from dashboard.console.routing import websocket_urlpatterns
from dashboard.groups import ALERTS, SPANS, session_safe_id
from dashboard.projects.access import Access
from dashboard.projects.models import (
    OPERATOR,
    VIEWER,
    AgentOwner,
    Membership,
    Project,
    default_project_id,
)
from dashboard.record.store import store_calls
from dashboard.runs.models import KernelState, RunRecord, TuningProfile
from dashboard.runs.permissions import OPERATORS_GROUP
from dashboard.runs.workstate import GATEWAY_OWNER_PREFIX
from dashboard.telemetry.models import Alert, AlertRule, SpanRecord
from scroll_core import wire

pytestmark = pytest.mark.django_db(transaction=True)

A_SESSION = "alpha:one"
B_SESSION = "bravo:one"
# Words only project B's session holds: no page of project A may show them.
B_SECRET = "zanzibarsecret"


def _span_dict(session_id: str, span_id: str, trace: str) -> dict:
    return {
        "trace_id": trace * 32,
        "span_id": span_id,
        "parent_id": None,
        "name": "scroll.expand",
        "start_ns": 1_700_000_000_000_000_000,
        "end_ns": 1_700_000_000_020_000_000,
        "duration_ms": 20.0,
        "status": "ok",
        "status_message": None,
        "attributes": {"scroll.seq_lo": 1},
        "session_id": session_id,
        "kind": "internal",
        "events": [],
    }


@pytest.fixture
def world(console_log, django_user_model):
    """Two projects, each owning one agent with a session, spans, an alert, a kernel, a run
    and a recorded call; users: a viewer of A (through a group, and in Operators), an
    operator of A, a viewer of B."""
    log = console_log
    log.append(
        session_id=A_SESSION, agent_id="alpha", kind="context_msg", role="user",
        content="kerberos rollout for alpha",
    )  # fmt: skip
    log.append(
        session_id=B_SESSION, agent_id="bravo", kind="context_msg", role="user",
        content=f"kerberos rollout for bravo {B_SECRET}",
    )  # fmt: skip
    a = Project.objects.create(name="Alpha team")
    b = Project.objects.create(name="Bravo team")
    AgentOwner.objects.create(agent_id="alpha", project=a)
    AgentOwner.objects.create(agent_id="bravo", project=b)
    profile = TuningProfile.get_default()
    rule, _ = AlertRule.objects.get_or_create(kind=AlertRule.INDEX_GAP)
    for session, agent, sid, trace in ((A_SESSION, "alpha", "a" * 16, "a"),
                                       (B_SESSION, "bravo", "b" * 16, "b")):  # fmt: skip
        SpanRecord.objects.create(**{
            k: v for k, v in _span_dict(session, sid, trace).items() if k != "status_message"
        })  # fmt: skip
        Alert.objects.create(rule=rule, session_id=session, key="k", message=f"gap in {agent}")
        KernelState.objects.create(
            session_id=session, worker=GATEWAY_OWNER_PREFIX + "web1", alive=True,
            updated_at=timezone.now(),
        )  # fmt: skip
        RunRecord.objects.create(
            session_id=session, agent_id=agent, task=f"task of {agent}", profile=profile,
            status=RunRecord.RUNNING,
        )  # fmt: skip
        body = b'{"model":"m","messages":[{"role":"user","content":"%s"}]}' % agent.encode()
        store_calls([wire.WireCall(session, "m", "gateway", body=body, sends=1, started_at=1e9)])
    operators = Group.objects.get(name=OPERATORS_GROUP)
    viewers_a = Group.objects.create(name="alpha viewers")
    Membership.objects.create(project=a, group=viewers_a, role=VIEWER)
    alice = django_user_model.objects.create_user("alice", password="pw-alice-1")
    alice.groups.add(viewers_a, operators)  # Django permissions, but only a viewer of A
    anna = django_user_model.objects.create_user("anna", password="pw-anna-1")
    anna.groups.add(operators)
    Membership.objects.create(project=a, user=anna, role=OPERATOR)
    bob = django_user_model.objects.create_user("bob", password="pw-bob-1")
    Membership.objects.create(project=b, user=bob, role=VIEWER)
    # The default project stays open to everyone; it owns neither agent.
    return {"a": a, "b": b, "alice": alice, "anna": anna, "bob": bob, "log": log}


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.django_db(transaction=False)  # before any flush: the migrated rows
def test_the_migration_made_one_default_project_open_to_everyone(django_user_model):
    default = Project.objects.get(is_default=True)
    assert default.everyone_role == OPERATOR
    newcomer = django_user_model.objects.create_user("new", password="pw-new-1")
    assert Access(newcomer).everything  # the only project: a fresh console shows all
    assert default_project_id() == default.pk


def test_a_user_of_a_sees_only_as_sessions_and_search_hits(world):
    alice = _client(world["alice"])
    home = alice.get("/", {"q": "kerberos"}).content.decode()
    assert A_SESSION in home and "alpha" in home
    assert B_SESSION not in home and "bravo" not in home and B_SECRET not in home
    assert alice.get("/", {"q": B_SECRET}).context["hits"] == []
    assert len(_client(world["bob"]).get("/", {"q": B_SECRET}).context["hits"]) == 1
    bob = _client(world["bob"]).get("/", {"q": "kerberos"}).content.decode()
    assert B_SESSION in bob and A_SESSION not in bob


def test_a_session_page_names_no_agent_of_another_project_through_grants(world):
    from dashboard.runs.grants import AgentGrant

    AgentGrant.objects.create(reader_agent="alpha", readable_agent="bravo", reason="x")
    AgentGrant.objects.create(reader_agent="bravo", readable_agent="alpha", reason="y")
    page = _client(world["alice"]).get(f"/sessions/{A_SESSION}/").content.decode()
    assert "bravo" not in page
    assert "bravo" in _client(world["bob"]).get(f"/sessions/{B_SESSION}/").content.decode()


def test_another_projects_session_event_and_search_answer_404(world):
    alice = _client(world["alice"])
    b_seq = world["log"].session(B_SESSION).last_seq
    assert alice.get(f"/sessions/{A_SESSION}/").status_code == 200
    assert alice.get(f"/sessions/{B_SESSION}/").status_code == 404
    assert alice.get(f"/sessions/{B_SESSION}/", {"q": "kerberos"}).status_code == 404
    assert alice.get(f"/events/{b_seq}/").status_code == 404
    assert _client(world["bob"]).get(f"/events/{b_seq}/").status_code == 200


def test_traces_spans_and_trace_trees_of_another_project_stay_hidden(world):
    alice = _client(world["alice"])
    traces = alice.get("/traces/").content.decode()
    assert "a" * 16 in traces and "b" * 16 not in traces
    assert alice.get(f"/traces/?session={B_SESSION}").content.decode().count("b" * 16) == 0
    assert alice.get(f"/traces/spans/{'b' * 16}/").status_code == 404
    assert alice.get(f"/traces/spans/{'a' * 16}/").status_code == 200
    assert alice.get(f"/traces/{'b' * 32}/").status_code == 404
    assert alice.get(f"/traces/{'a' * 32}/").status_code == 200


def test_the_inspector_its_export_and_the_replay_lab_refuse_another_project(world):
    alice = _client(world["alice"])
    assert alice.get(f"/sessions/{B_SESSION}/calls/").status_code == 404
    assert alice.get(f"/sessions/{B_SESSION}/calls/0/").status_code == 404
    assert alice.get(f"/sessions/{B_SESSION}/calls/0/sent.json").status_code == 404
    assert alice.get(f"/sessions/{A_SESSION}/calls/0/sent.json").status_code == 200
    assert alice.get(f"/sessions/{A_SESSION}/calls/0/").status_code == 200
    replay = alice.get("/replay/", {"session": B_SESSION})
    assert replay.status_code == 404
    assert B_SESSION in replay.content.decode()  # named back in the error, never listed
    assert f'value="{B_SESSION}"' not in alice.get("/replay/").content.decode()


def test_alerts_and_the_header_count_show_only_the_users_projects(world):
    alice = _client(world["alice"])
    page = alice.get("/alerts/").content.decode()
    assert "gap in alpha" in page and "gap in bravo" not in page
    assert alice.get("/").context["open_alerts"] == 1
    b_alert = Alert.objects.get(session_id=B_SESSION)
    assert alice.post(f"/alerts/{b_alert.pk}/acknowledge/").status_code == 404
    b_alert.refresh_from_db()
    assert b_alert.state == Alert.OPEN


def test_kernels_of_another_project_are_neither_shown_nor_controllable(world):
    anna = _client(world["anna"])
    page = anna.get("/kernels/").content.decode()
    assert A_SESSION in page and B_SESSION not in page
    assert anna.post(f"/kernels/restart/{B_SESSION}/").status_code == 404
    assert anna.post(f"/kernels/restart/{A_SESSION}/").status_code == 302  # her project


def test_a_viewer_cannot_operate_even_with_the_django_permissions(world):
    alice = _client(world["alice"])
    assert world["alice"].has_perm("runs.stop_run")
    page = alice.get("/kernels/").content.decode()
    assert "viewer: no controls in this project" in page
    assert alice.post(f"/kernels/restart/{A_SESSION}/").status_code == 403
    assert alice.post(f"/runs/{A_SESSION}/stop/").status_code == 403
    alert = Alert.objects.get(session_id=A_SESSION)
    assert alice.post(f"/alerts/{alert.pk}/resolve/").status_code == 403
    before = RunRecord.objects.count()
    form = {"task": "Say hi.", "profile": str(TuningProfile.get_default().pk), "agent": "alpha"}
    refused = alice.post("/runs/", form)
    assert refused.status_code == 400
    assert "No agent 'alpha'" in " ".join(str(m) for m in refused.context["messages"])
    assert RunRecord.objects.count() == before
    assert 'name="project"' not in alice.get("/runs/").content.decode()


def test_runs_list_and_the_start_form_offer_only_the_users_projects(world):
    anna = _client(world["anna"])
    page = anna.get("/runs/").content.decode()
    assert "task of alpha" in page and "task of bravo" not in page
    assert 'value="alpha"' in page and 'value="bravo"' not in page
    # Anna operates A and, as everyone does, the default project: she picks.
    assert 'name="project"' in page
    refused = anna.post(
        "/runs/",
        {"task": "Say hi.", "profile": str(TuningProfile.get_default().pk),
         "project": str(world["b"].pk)},
    )  # fmt: skip
    assert refused.status_code == 400
    assert "not an operator of that project" in " ".join(
        str(m) for m in refused.context["messages"]
    )
    assert not AgentOwner.objects.filter(project=world["b"]).exclude(agent_id="bravo").exists()


def test_a_run_started_in_a_project_belongs_to_it(world):
    anna = _client(world["anna"])
    answer = anna.post(
        "/runs/",
        {"task": "Say hi.", "profile": str(TuningProfile.get_default().pk),
         "project": str(world["a"].pk)},
    )  # fmt: skip
    assert answer.status_code == 302
    run = RunRecord.objects.get(task="Say hi.")
    assert AgentOwner.objects.get(agent_id=run.agent_id).project == world["a"]
    assert _client(world["bob"]).get(f"/sessions/{run.session_id}/").status_code == 404
    assert anna.get(f"/sessions/{run.session_id}/").status_code == 200


def test_locking_the_default_project_hides_unowned_agents(world, django_user_model):
    world["log"].append(
        session_id="imported:1", agent_id="imported", kind="context_msg", role="user",
        content="an imported transcript",
    )  # fmt: skip
    alice = _client(world["alice"])
    assert alice.get("/sessions/imported:1/").status_code == 200
    Project.objects.filter(is_default=True).update(everyone_role="")
    assert _client(world["alice"]).get("/sessions/imported:1/").status_code == 404
    root = django_user_model.objects.create_superuser("root", "r@example.invalid", "pw-r-1")
    assert _client(root).get(f"/sessions/{B_SESSION}/").status_code == 200


# ---------------------------------------------------------------------------- live sockets
@pytest.fixture(autouse=True)
def _a_channel_layer_per_test():
    channel_layers.backends.clear()
    yield
    channel_layers.backends.clear()


async def _connect(path, user):
    communicator = WebsocketCommunicator(URLRouter(websocket_urlpatterns), path)
    communicator.scope["user"] = user
    connected, _ = await communicator.connect()
    return communicator, connected


async def test_the_live_feed_sends_only_the_users_projects_spans_and_alerts(world):
    layer = get_channel_layer()
    alice = world["alice"]
    feed, connected = await _connect("/ws/feed/", alice)
    assert connected
    try:
        b_span = _span_dict(B_SESSION, "c" * 16, "c")
        await layer.group_send(SPANS, {"type": "span.finished", "span": b_span})
        batch = [_span_dict(B_SESSION, "d" * 16, "d"), _span_dict(A_SESSION, "e" * 16, "e")]
        await layer.group_send(SPANS, {"type": "spans.finished", "spans": batch})
        frame = await feed.receive_from(timeout=3)
        assert "e" * 16 in frame and "d" * 16 not in frame and "c" * 16 not in frame
        b_alert = await sync_to_async(lambda: Alert.objects.get(session_id=B_SESSION).to_dict())()
        await layer.group_send(ALERTS, {"type": "alert.changed", "alert": b_alert})
        assert await feed.receive_nothing(timeout=0.5)
    finally:
        await feed.disconnect()


async def test_a_session_socket_of_another_project_is_refused(world):
    alice = world["alice"]
    path = f"/ws/sessions/{session_safe_id(B_SESSION)}/?session={B_SESSION}"
    socket, connected = await _connect(path, alice)
    assert not connected
    # Naming a readable session over another session's group is refused too.
    path = f"/ws/sessions/{session_safe_id(B_SESSION)}/?session={A_SESSION}"
    socket, connected = await _connect(path, alice)
    assert not connected
    path = f"/ws/sessions/{session_safe_id(A_SESSION)}/?session={A_SESSION}"
    socket, connected = await _connect(path, alice)
    assert connected
    await socket.disconnect()


async def test_the_kernels_socket_lists_only_the_users_projects(world):
    feed, connected = await _connect("/ws/feed/?spans=0&kernels=1", world["bob"])
    assert connected
    try:
        frame = await feed.receive_from(timeout=3)
        assert B_SESSION in frame and A_SESSION not in frame
    finally:
        await feed.disconnect()


# ---------------------------------------------------------------------------- Django admin
def test_a_project_admin_manages_only_their_projects_members_in_admin(world, django_user_model):
    from dashboard.projects.models import ADMIN

    pat = django_user_model.objects.create_user("pat", password="pw-pat-1", is_staff=True)
    Membership.objects.create(project=world["a"], user=pat, role=ADMIN)
    client = _client(pat)
    listing = client.get("/admin/projects/project/").content.decode()
    assert "Alpha team" in listing and "Bravo team" not in listing
    assert client.get(f"/admin/projects/project/{world['b'].pk}/change/").status_code in (
        302,
        403,
    )
    a = world["a"]
    form = {
        "name": a.name, "description": "", "everyone_role": "",
        "memberships-TOTAL_FORMS": "1", "memberships-INITIAL_FORMS": "0",
        "memberships-0-project": str(a.pk), "memberships-0-user": str(world["bob"].pk),
        "memberships-0-role": VIEWER,
        "agents-TOTAL_FORMS": "0", "agents-INITIAL_FORMS": "0",
    }  # fmt: skip
    answer = client.post(f"/admin/projects/project/{a.pk}/change/", form)
    assert answer.status_code == 302, answer.content.decode()[:2000]
    assert Membership.objects.filter(project=a, user=world["bob"], role=VIEWER).exists()
    # Bob now reads A's session too; a plain viewer of A gets no admin at all.
    assert _client(world["bob"]).get(f"/sessions/{A_SESSION}/").status_code == 200
    assert _client(world["alice"]).get("/admin/projects/project/").status_code == 302
