"""Who sees what, in a real browser (issue 31): a user of project A searches, browses traces
and alerts, and watches the live traces stream without meeting anything of project B; a
viewer of A sees the kernels of A with no controls."""

from __future__ import annotations

import time

import pytest

from tests.browser.conftest import login, shoot

# What this checks is the page in a real browser (layout, scripts, what a user can reach),
# which the console's database and channel layer cannot change: it runs on the embedded
# pass only (tests/conftest.py, same_on_every_backend); the Redis live path is
# test_console_live.py's and test_console_redis.py's.
pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.same_on_every_backend,
]

A_SESSION = "alpha:one"
B_SESSION = "bravo:one"
B_SECRET = "zanzibarsecret"


def _span(session_id: str, span_id: str) -> dict:
    now = time.time_ns()
    return {
        "trace_id": span_id * 2,
        "span_id": span_id,
        "parent_id": None,
        "name": "scroll.expand",
        "start_ns": now - 5_000_000,
        "end_ns": now,
        "duration_ms": 5.0,
        "status": "ok",
        "status_message": None,
        "attributes": {},
        "session_id": session_id,
        "kind": "internal",
        "events": [],
    }


@pytest.fixture
def alpha_page(browser, asgi_server, console_log, django_user_model):
    from django.contrib.auth.models import Group
    from django.utils import timezone

    from dashboard.projects.models import VIEWER, AgentOwner, Membership, Project
    from dashboard.runs.models import KernelState
    from dashboard.runs.permissions import OPERATORS_GROUP
    from dashboard.runs.workstate import GATEWAY_OWNER_PREFIX
    from dashboard.telemetry.models import Alert, AlertRule

    a = Project.objects.create(name="Alpha team")
    b = Project.objects.create(name="Bravo team")
    rule, _ = AlertRule.objects.get_or_create(kind=AlertRule.INDEX_GAP)
    for session, agent, project in ((A_SESSION, "alpha", a), (B_SESSION, "bravo", b)):
        AgentOwner.objects.create(agent_id=agent, project=project)
        console_log.append(
            session_id=session, agent_id=agent, kind="context_msg", role="user",
            content=f"kerberos rollout for {agent}" + (f" {B_SECRET}" if agent == "bravo" else ""),
        )  # fmt: skip
        Alert.objects.create(rule=rule, session_id=session, key="k", message=f"gap in {agent}")
        KernelState.objects.create(
            session_id=session, worker=GATEWAY_OWNER_PREFIX + "web1", alive=True,
            updated_at=timezone.now(),
        )  # fmt: skip
    user = django_user_model.objects.create_user("alice", password="pw-alice-1")
    # The Django permissions of an operator, but only a viewer of project A.
    user.groups.add(Group.objects.get(name=OPERATORS_GROUP))
    Membership.objects.create(project=a, user=user, role=VIEWER)
    pg = login(browser, asgi_server, "alice", "pw-alice-1")
    yield pg
    pg.context.close()


def test_a_user_of_project_a_meets_nothing_of_project_b(alpha_page):
    from dashboard.push import send_group, server_loop

    page = alpha_page
    page.goto(f"{page.base}/?q=kerberos")
    body = page.inner_text("main")
    assert A_SESSION in body and B_SESSION not in body and B_SECRET not in body
    shoot(page, "projects-sessions-search")

    page.goto(f"{page.base}/alerts/")
    body = page.inner_text("main")
    assert "gap in alpha" in body and "gap in bravo" not in body

    page.goto(f"{page.base}/kernels/")
    body = page.inner_text("main")
    assert A_SESSION in body and B_SESSION not in body
    assert "viewer: no controls in this project" in body
    assert page.locator("button", has_text="Restart").count() == 0

    response = page.goto(f"{page.base}/sessions/{B_SESSION}/")
    assert response is not None and response.status == 404

    # The live traces stream: B's span never arrives, A's does (sent after it).
    page.goto(f"{page.base}/traces/")
    page.wait_for_function("document.body.dataset.live === 'open'", timeout=10_000)
    assert server_loop() is not None
    assert send_group("scroll.spans", {"type": "span.finished", "span": _span(B_SESSION, "b" * 16)})
    assert send_group("scroll.spans", {"type": "span.finished", "span": _span(A_SESSION, "a" * 16)})
    page.wait_for_selector(f"#span-{'a' * 16}", timeout=10_000)
    assert page.locator(f"#span-{'b' * 16}").count() == 0
    shoot(page, "projects-traces-live")
