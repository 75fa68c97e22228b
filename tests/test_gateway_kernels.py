"""Gateway kernels on the Kernels page: registered by the web process that serves the
session (``GatewayService.heartbeat``), marked gateway-driven, alive while that heartbeat
keeps the row fresh, and refused the console actions only run workers answer."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone
from gateway_clients import ask, make_key, oa
from gateway_upstream import completion, text, tool_call

from dashboard.gateway.service import GATEWAY_OWNER, get_service
from dashboard.runs.models import KernelState
from scroll_core.prompts import RECALL_TOOL

pytestmark = pytest.mark.django_db(transaction=True)


def _recall_once(gateway, upstream, session: str) -> str:
    """One request whose upstream runs a cell (the session's kernel starts); the key."""
    upstream.then(
        completion("", [tool_call(RECALL_TOOL, {"code": "y = 7\nprint(y)"}, "call_k")]),
        text("seven"),
    )
    key = make_key(upstream)
    client = oa(gateway, key, default_headers={"X-Scroll-Session": session})
    ask(client, [{"role": "user", "content": "keep seven"}])
    return key


def test_a_gateway_kernel_is_listed_marked_and_without_run_worker_actions(
    gateway, upstream, operator
):
    _recall_once(gateway, upstream, "gw-kernel")
    assert get_service().heartbeat() == []  # nothing lost; the live kernel written
    row = KernelState.objects.get(session_id="gw:alice:gw-kernel")
    assert row.worker == GATEWAY_OWNER and row.alive and row.cells >= 1 and row.gateway

    page = operator.get(reverse("kernels")).content.decode()
    listed = page.split('class="kernel gateway"', 1)
    assert len(listed) == 2, "the gateway's kernel is not listed as gateway-driven"
    own_row = listed[1].split("</tr>", 1)[0]
    assert "gw:alice:gw-kernel" in own_row and "gateway-driven" in own_row
    assert "Restart" not in own_row and "Stop" not in own_row

    refused = operator.post(
        reverse("kernel_action", args=["restart", "gw:alice:gw-kernel"]), follow=True
    ).content.decode()
    assert "driven by the gateway" in refused and "not done" in refused
    assert KernelState.objects.get(session_id="gw:alice:gw-kernel").restarts == 0


def test_a_gateway_kernel_whose_web_process_stopped_beating_leaves_the_page(
    gateway, upstream, operator
):
    _recall_once(gateway, upstream, "gw-stale")
    service = get_service()
    service.heartbeat()
    assert "gw-stale" in operator.get(reverse("kernels")).content.decode()
    # As if its web process died: nothing refreshes the row past a lease. This process's
    # own heartbeat thread (every lease / 3) is held off while the page is read, or a beat
    # landing between the two statements would refresh the row it is meant to leave stale.
    with service._beating:
        KernelState.objects.filter(session_id="gw:alice:gw-stale").update(
            updated_at=timezone.now() - timedelta(minutes=5)
        )
        assert "gw-stale" not in operator.get(reverse("kernels")).content.decode()
    service.heartbeat()  # the process beats again: the row is fresh and listed once more
    assert "gw-stale" in operator.get(reverse("kernels")).content.decode()


def test_a_gateway_kernel_shut_down_in_its_process_is_marked_stopped_at_the_next_beat(
    gateway, upstream
):
    _recall_once(gateway, upstream, "gw-gone")
    service = get_service()
    service.heartbeat()
    first = KernelState.objects.get(session_id="gw:alice:gw-gone")
    assert first.alive
    service.heartbeat()  # nothing changed: the row is only refreshed
    again = KernelState.objects.get(session_id="gw:alice:gw-gone")
    assert again.cells == first.cells and again.updated_at >= first.updated_at
    # A row another process wrote over (a heartbeat racing a handover) is written again.
    KernelState.objects.filter(session_id="gw:alice:gw-gone").update(worker="gateway:other")
    service.heartbeat()
    assert KernelState.objects.get(session_id="gw:alice:gw-gone").worker == GATEWAY_OWNER
    service.kernels.release("gw:alice:gw-gone")  # as the manager's idle reaper would
    service.heartbeat()
    row = KernelState.objects.get(session_id="gw:alice:gw-gone")
    assert not row.alive and row.last_status == "shut down" and row.pid is None


def test_a_session_idle_past_its_time_is_trimmed_with_its_kernel_and_comes_back_from_the_log(
    gateway, upstream
):
    import time

    key = _recall_once(gateway, upstream, "gw-idle")
    service = get_service()
    session = "gw:alice:gw-idle"
    service.heartbeat()
    assert KernelState.objects.get(session_id=session).alive
    assert service.trim() == []  # not idle yet
    assert service.limits.owns(session)  # its lease is this process's until trimmed
    with service._holding(session):  # a request holds it: never trimmed under it
        assert service.trim(now=time.monotonic() + 10 * service.session_idle_s) == []
    assert service.trim(now=time.monotonic() + 10 * service.session_idle_s) == [session]
    assert session not in service.held_sessions()
    assert not service.limits.owns(session)
    assert session not in service.kernels.status()["sessions"]
    service.heartbeat()
    row = KernelState.objects.get(session_id=session)
    assert not row.alive and row.last_status == "shut down"
    # The client's next request is served from the log: nothing lost, nothing duplicated.
    client = oa(gateway, key, default_headers={"X-Scroll-Session": "gw-idle"})
    history = [{"role": "user", "content": "keep seven"}, {"role": "assistant", "content": "seven"},
               {"role": "user", "content": "again"}]  # fmt: skip
    assert ask(client, history)
    from dashboard.eventlog import get_event_log

    said = [e.content for e in get_event_log().session_events(session, limit=None)
            if e.role == "user"]  # fmt: skip
    assert said == ["keep seven", "again"]
