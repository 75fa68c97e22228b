"""An operator's kernel restart or stop from the Kernels page (``views.kernel_action``): the
page asks for confirmation first, the action raises no "kernel crash" alert, and it leaves an
audited entry (who, when, what) on the session's timeline. Through the real views, a real
worker with a process-tier kernel, and the console's span sink with its alert rules."""

from __future__ import annotations

import re
import time

import pytest
from django.urls import reverse

from dashboard.runs import runner as runner_module
from dashboard.runs.models import KernelAction
from dashboard.telemetry.models import Alert, AlertRule, SpanRecord

pytestmark = pytest.mark.django_db(transaction=True)

CELL = "Run this.\n```python\nx = 6 * 7\nprint('answer', x)\n```"


def _wait_until(predicate, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting for the worker"
        time.sleep(0.05)


@pytest.fixture
def session_with_kernel(live_runner):
    """A run whose first turn ran a cell (so its kernel is live and listed), then waits."""
    run = runner_module.start_run(f"{CELL}\n---\n{CELL}", pause_s=300)
    _wait_until(lambda: any(k["session_id"] == run.session_id for k in _kernels()))
    yield run.session_id
    runner_module.stop_run(run.session_id)
    runner_module.wait_for_run(run.session_id, 60)


def _kernels():
    return runner_module.kernel_statuses()


def _form(html, action, session_id):
    url = reverse("kernel_action", args=[action, session_id])
    return re.search(rf'<form [^>]*action="{re.escape(url)}"[^>]*>', html).group(0)


def test_restart_and_stop_ask_for_confirmation_naming_the_session(operator, session_with_kernel):
    html = operator.get(reverse("kernels")).content.decode()

    for action in ("restart", "stop"):
        confirm = re.search(r'hx-confirm="([^"]*)"', _form(html, action, session_with_kernel))
        assert confirm, f"{action} asks for no confirmation"
        assert session_with_kernel in confirm.group(1)
        assert "timeline" in confirm.group(1)
    # Reading actions change nothing: no question.
    for action in ("status", "digest"):
        assert "hx-confirm" not in _form(html, action, session_with_kernel)


def test_an_operators_restart_raises_no_kernel_alert(operator, session_with_kernel, live_runner):
    runner, sink = live_runner
    sid = session_with_kernel

    operator.post(reverse("kernel_action", args=["restart", sid]))

    _wait_until(lambda: runner.kernels.status()["sessions"][sid].restarts == 1)
    restarts = SpanRecord.objects.filter(name="scroll.kernel.restart", session_id=sid)
    _wait_until(lambda: sink.flush(5.0) and restarts.exists())
    assert sink.flush(5.0)  # the batch holding the restart span is evaluated, alerts included
    assert not Alert.objects.filter(rule__kind=AlertRule.KERNEL_FAILURE).exists()
    # One span per restart, marked as asked for (a crash's restart still raises the alert).
    assert [s.attributes.get("scroll.requested") for s in restarts] == [True]


def test_a_restart_and_a_stop_are_audited_on_the_sessions_timeline(
    operator, session_with_kernel, live_runner
):
    runner, _ = live_runner
    sid = session_with_kernel

    operator.post(reverse("kernel_action", args=["restart", sid]))
    _wait_until(lambda: runner.kernels.status()["sessions"][sid].restarts == 1)
    operator.post(reverse("kernel_action", args=["stop", sid]))
    _wait_until(lambda: sid not in runner.kernels.status()["sessions"])

    audited = list(KernelAction.objects.filter(session_id=sid).order_by("id"))
    assert [(a.action, a.operator) for a in audited] == [
        ("restart", "operator"),
        ("stop", "operator"),
    ]
    html = operator.get(reverse("session", args=[sid])).content.decode()
    timeline = html.split('id="timeline"', 1)[1].split("</ul>", 1)[0]
    for entry in audited:
        item = re.search(rf'<li id="kernel-action-{entry.pk}"[^>]*>(.*?)</li>', timeline)
        assert item, f"kernel {entry.action} is not on the timeline"
        text = re.sub(r"<[^>]+>", "", item.group(1))
        assert f"kernel {entry.action} by operator" in text
        assert entry.at.strftime("%H:%M:%S") in text


def test_a_restart_no_worker_could_do_is_audited_as_not_done(operator, console_log):
    operator.post(reverse("kernel_action", args=["restart", "nobody-runs-this"]))

    entry = KernelAction.objects.get(session_id="nobody-runs-this")
    assert (entry.action, entry.operator, entry.done) == ("restart", "operator", False)
    assert "no worker owns" in entry.detail


def test_the_live_timeline_sends_the_kernel_actions_after_its_cursor(console_log):
    from dashboard.console import session_live

    first = KernelAction.objects.create(session_id="s1", action="restart", operator="op", done=True)
    page = session_live.timeline_page("s1", None)
    assert [e.dom_id for e in page.entries] == [f"kernel-action-{first.pk}"]

    second = KernelAction.objects.create(session_id="s1", action="stop", operator="op", done=True)
    entries, *_, action_after = session_live.timeline_after(
        "s1", None, page.compress_after, page.change_after, page.action_after
    )
    assert [e.dom_id for e in entries] == [f"kernel-action-{second.pk}"]
    assert action_after == second.pk
