"""Running code is a permission, not a login: through the real views, a logged-in user without
the console's permissions cannot start or stop runs, restart or stop kernels, have a run
execute task code or save a profile from the replay lab; a member of "Operators" can."""

from __future__ import annotations

import threading
import time

import pytest
from django.contrib.auth.models import Group, Permission
from django.urls import reverse

from dashboard.runs import runner as runner_module
from dashboard.runs.models import RunRecord, TuningProfile
from dashboard.runs.permissions import OPERATORS_GROUP
from dashboard.runs.runner import TASK_CODE_OFF
from dashboard.runs.worker import Worker
from scroll_core.kernel import KernelConfig, KernelManager

pytestmark = pytest.mark.django_db(transaction=True)

CELL = "Run this.\n```python\nx = 6 * 7\nprint('answer', x)\n```"
EVERY_PERMISSION = {
    "start_run",
    "stop_run",
    "control_kernel",
    "run_task_code",
    "save_profile_from_replay",
}


@pytest.fixture
def runner(console_log, monkeypatch):
    kernels = KernelManager(KernelConfig(sandbox="process"), pool_size=0)
    runner = Worker(slots=2, kernels=kernels, poll_s=0.05).start()
    yield runner
    runner.shutdown()


@pytest.fixture
def viewer(client, django_user_model):
    """A logged-in account with no permissions (not staff)."""
    user = django_user_model.objects.create_user("viewer", password="pw-viewer-1")
    client.force_login(user)
    return client


def _user_with(django_user_model, client, *codenames):
    user = django_user_model.objects.create_user("partial", password="pw-partial-1")
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    client.force_login(user)
    return client


def _start_form(task=CELL, **extra):
    return {"task": task, "profile": str(TuningProfile.get_default().pk), **extra}


def _held_run(runner):
    """A run waiting inside its first cell until the returned event is set."""
    gate = threading.Event()
    task = "Wait.\n```python\nprint(ops.hold())\n```"
    run = runner_module.start_run(
        task, host_functions={"ops.hold": lambda: gate.wait(30) and "released"}
    )
    return run, gate


def test_the_operators_group_holds_every_console_permission_and_a_viewer_none(django_user_model):
    group = Group.objects.get(name=OPERATORS_GROUP)
    assert set(group.permissions.values_list("codename", flat=True)) == EVERY_PERMISSION
    viewer = django_user_model.objects.create_user("v", password="pw-v-12345")
    assert not any(viewer.has_perm(f"dashboard.{p}") for p in EVERY_PERMISSION)
    admin = django_user_model.objects.create_superuser("root", "r@example.invalid", "pw-r-12345")
    assert all(admin.has_perm(f"dashboard.{p}") for p in EVERY_PERMISSION)


# ------------------------------------------------------------------------- starting runs
def test_a_viewer_sees_no_start_form_and_a_forced_start_is_refused(viewer, runner):
    page = viewer.get(reverse("runs")).content.decode()
    assert '<form class="run"' not in page and 'id="runs-read-only"' in page

    response = viewer.post(reverse("runs"), _start_form())

    assert response.status_code == 403
    assert "runs.start_run" in response.content.decode()
    assert not RunRecord.objects.exists()


def test_an_operator_starts_a_run_as_its_own_agent_and_its_task_code_runs(operator, runner):
    assert '<form class="run"' in operator.get(reverse("runs")).content.decode()

    response = operator.post(reverse("runs"), _start_form())

    assert response.status_code == 302
    run = RunRecord.objects.get()
    assert run.agent_id.startswith("run-") and run.task_code
    run = runner_module.wait_for_run(run.session_id, 60)
    assert run.status == RunRecord.DONE, run.error
    assert "answer 42" in run.last_answer
    assert run.created_by.username == "operator"


def test_without_run_task_code_the_fenced_code_is_not_executed_and_the_first_event_says_so(
    client, django_user_model, runner, console_log
):
    starter = _user_with(django_user_model, client, "start_run")
    page = starter.get(reverse("runs")).content.decode()
    assert 'id="task-code-off"' in page
    task = (
        "Run this.\n```python\nopen('/tmp/scroll-task-code-ran', 'w').write('x')\nprint(6*7)\n```"
    )

    assert starter.post(reverse("runs"), _start_form(task)).status_code == 302

    run = runner_module.wait_for_run(RunRecord.objects.get().session_id, 60)
    assert run.status == RunRecord.DONE, run.error
    assert run.task_code is False
    events = console_log.session_events(run.session_id, limit=None)
    assert events[0].role == "system" and events[0].content == TASK_CODE_OFF
    assert events[0].agent_id == run.agent_id
    # No cell ran: no tool call, no tool result, and the answer says why.
    assert not [e for e in events if e.kind == "tool_result" or e.tool_call_id]
    assert "42" not in run.last_answer
    assert "run_task_code" in run.last_answer


def test_a_run_may_continue_a_known_agent_but_not_an_unknown_one(operator, runner, console_log):
    console_log.append(session_id="old", agent_id="run-old", kind="context_msg", role="user",
                       content="remember the blue door")  # fmt: skip
    page = operator.get(reverse("runs")).content.decode()
    assert '<option value="run-old">' in page

    refused = operator.post(reverse("runs"), _start_form(agent="someone-else"))
    assert refused.status_code == 400
    assert "No agent &#x27;someone-else&#x27;" in refused.content.decode()
    assert not RunRecord.objects.exists()

    assert operator.post(reverse("runs"), _start_form(agent="run-old")).status_code == 302
    run = runner_module.wait_for_run(RunRecord.objects.get().session_id, 60)
    assert run.agent_id == "run-old"
    assert {e.agent_id for e in console_log.session_events(run.session_id, limit=None)} == {
        "run-old"
    }


@pytest.mark.parametrize("profile", ["abc", "-1", "99999", "9" * 30, "١٢"])
def test_a_profile_id_that_names_no_profile_is_a_404_not_a_500(operator, runner, profile):
    response = operator.post(reverse("runs"), {"task": CELL, "profile": profile})

    assert response.status_code == 404
    assert not RunRecord.objects.exists()


def test_a_run_without_a_profile_is_a_clear_400(operator, runner):
    response = operator.post(reverse("runs"), {"task": CELL, "profile": ""})

    assert response.status_code == 400
    assert "A run needs a task and a profile." in response.content.decode()
    assert not RunRecord.objects.exists()


# ------------------------------------------------------------------------- stopping runs
def test_a_viewer_cannot_stop_a_run_and_an_operator_can(client, django_user_model, runner):
    run, gate = _held_run(runner)
    viewer = django_user_model.objects.create_user("viewer", password="pw-viewer-1")
    client.force_login(viewer)
    url = reverse("run_stop", args=[run.session_id])

    assert client.post(url).status_code == 403
    run.refresh_from_db()
    assert run.active

    operator = django_user_model.objects.create_user("operator", password="pw-operator-1")
    operator.groups.add(Group.objects.get(name=OPERATORS_GROUP))
    client.force_login(operator)
    response = client.post(url)
    gate.set()

    assert response.status_code == 302
    run = runner_module.wait_for_run(run.session_id, 60)
    assert run.status == RunRecord.STOPPED


def test_the_stop_button_shows_only_with_the_permission(client, django_user_model, runner):
    run, gate = _held_run(runner)
    try:
        viewer = django_user_model.objects.create_user("viewer", password="pw-viewer-1")
        client.force_login(viewer)
        assert (
            "run-stop" not in client.get(reverse("session", args=[run.session_id])).content.decode()
        )
        viewer.user_permissions.add(Permission.objects.get(codename="stop_run"))
        viewer = django_user_model.objects.get(pk=viewer.pk)  # the permission cache is per object
        client.force_login(viewer)
        assert "run-stop" in client.get(reverse("session", args=[run.session_id])).content.decode()
    finally:
        gate.set()
        runner_module.stop_run(run.session_id)
        runner_module.wait_for_run(run.session_id, 60)


# ------------------------------------------------------------------------------ kernels
@pytest.mark.parametrize("action", ["restart", "stop"])
def test_a_viewer_cannot_restart_or_stop_a_kernel(viewer, runner, action):
    runner.kernels.get("k-session")

    response = viewer.post(reverse("kernel_action", args=[action, "k-session"]))

    assert response.status_code == 403
    assert "runs.control_kernel" in response.content.decode()
    assert "k-session" in runner.kernels.status()["sessions"]
    assert runner.kernels.status()["sessions"]["k-session"].restarts == 0
    assert "Restart</button>" not in viewer.get(reverse("kernels")).content.decode()


def test_an_operator_restarts_and_stops_a_kernel(operator, runner):
    # A run whose first turn ran a cell, so its worker recorded the kernel, then waits.
    run = runner_module.start_run(f"{CELL}\n---\n{CELL}", pause_s=300)
    sid = run.session_id
    _wait_until(lambda: runner_module.kernel_statuses())
    assert "Restart</button>" in operator.get(reverse("kernels")).content.decode()

    restarted = operator.post(reverse("kernel_action", args=["restart", sid]))
    assert restarted.status_code == 302
    # The worker answers within the console's second; a loaded machine may take longer.
    _wait_until(lambda: runner.kernels.status()["sessions"][sid].restarts == 1)

    stopped = operator.post(reverse("kernel_action", args=["stop", sid]))
    assert stopped.status_code == 302
    _wait_until(lambda: sid not in runner.kernels.status()["sessions"])


def _wait_until(predicate, timeout=60.0):
    """Poll until the worker has done it (its state is the marker), at most ``timeout``."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting for the worker"
        time.sleep(0.05)


# ---------------------------------------------------------------------- the replay lab
def _replay_save(client, name, **knobs):
    fields = {**TuningProfile.get_default().knobs(), **knobs}
    return client.post(reverse("replay"), {"session": "s1", "save": "1", "name": name, **fields})


def test_a_viewer_cannot_save_a_profile_from_the_replay_lab(viewer, console_log):
    console_log.append(session_id="s1", kind="context_msg", role="user", content="hello")

    response = _replay_save(viewer, "mine", exec_timeout_s="86400000", print_cap="2000000000")

    assert response.status_code == 403
    assert "runs.save_profile_from_replay" in response.content.decode()
    assert not TuningProfile.objects.filter(name="mine").exists()


def test_an_operator_saves_a_profile_but_not_one_above_the_upper_bounds(operator, console_log):
    console_log.append(session_id="s1", kind="context_msg", role="user", content="hello")

    too_big = _replay_save(operator, "huge", exec_timeout_s="86400000")
    assert too_big.status_code == 400
    assert "exec_timeout_s must be at most 600" in too_big.content.decode()
    shown = operator.get(reverse("replay"), {"session": "s1", "context_size": "100000000"})
    assert shown.status_code == 400
    assert "context_size must be at most 10,000,000" in shown.content.decode()
    assert not TuningProfile.objects.filter(name="huge").exists()

    saved = _replay_save(operator, "tuned", exec_timeout_s="120")
    assert saved.status_code == 302
    assert TuningProfile.objects.get(name="tuned").exec_timeout_s == 120.0


@pytest.mark.parametrize("task", ["---", "---\n---\n  ---  \n", "\n---\n\n"])
def test_a_task_of_only_turn_separators_is_refused_in_the_form_not_a_500(operator, runner, task):
    page = operator.get(reverse("runs")).content.decode()
    assert "splits the task into turns" in page  # the form says what --- does
    refused = operator.post(reverse("runs"), _start_form(task=task))
    assert refused.status_code == 400
    assert "at least one non-empty turn" in refused.content.decode()
    assert not RunRecord.objects.exists()
