from __future__ import annotations

import time

import pytest

from dashboard.runs import runner as runner_module
from dashboard.runs.models import (
    CompressEvent,
    ProfileChange,
    RunRecord,
    TuningProfile,
    WorkerCommand,
)
from dashboard.runs.profiles import save_profile
from dashboard.runs.runner import split_task
from dashboard.runs.worker import Worker
from dashboard.runs.worker_commands import send
from scroll_core.kernel import KernelConfig, KernelManager, sandbox

pytestmark = pytest.mark.django_db(transaction=True)

CELL = "Run this.\n```python\nx = 6 * 7\nprint('answer', x)\n```"


@pytest.fixture
def runner(console_log):
    """A worker thread in this process, as `make run` starts one."""
    kernels = KernelManager(KernelConfig(sandbox="process"), pool_size=0)
    worker = Worker(slots=2, kernels=kernels, poll_s=0.05).start()
    yield worker
    worker.shutdown()


def wait_until(predicate, timeout=30.0):
    """Poll the database until ``predicate()`` holds (the worker writes the marker)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting for the worker"
        time.sleep(0.05)


def test_split_task_cuts_turns_on_separator_lines():
    assert split_task("one\n---\n\ntwo\nlines\n ---\n") == ["one", "two\nlines"]
    assert split_task("  \n---\n") == []


def test_a_run_drives_a_session_in_the_background_and_records_each_compress(runner):
    run = runner_module.start_run(f"{CELL}\n---\n{CELL}")
    assert run.status == RunRecord.QUEUED

    run = runner_module.wait_for_run(run.session_id, 60)

    assert run.status == RunRecord.DONE, run.error
    assert (run.turns, run.steps) == (2, 4)
    assert "answer 42" in run.last_answer
    assert run.model_name == "scroll-policy-baseline"
    events = CompressEvent.objects.filter(run=run)
    assert events.count() == 6  # turn start + after each of two steps, per turn
    assert all(e.trigger_tokens == run.trigger_tokens for e in events)
    assert run.last_report["total"] == run.view_tokens
    # The kernel is given back when the run ends.
    assert runner_module.kernel_statuses() == []


def test_a_profile_edit_applies_at_the_next_compress(runner):
    profile = TuningProfile.get_default()

    def tune() -> str:
        profile.trigger_ratio = 0.5
        save_profile(profile)
        return "tuned"

    task = "Tune it.\n```python\nprint(tune.now())\n```"
    run = runner_module.start_run(task, profile, host_functions={"tune.now": tune})
    run = runner_module.wait_for_run(run.session_id, 60)

    assert run.status == RunRecord.DONE, run.error
    triggers = list(CompressEvent.objects.filter(run=run).values_list("trigger_tokens", flat=True))
    # turn start (0.8 * C), then the compress after the cell that edited the profile (0.5 * C)
    assert triggers[0] == int(0.8 * profile.context_size)
    assert triggers[1:] == [int(0.5 * profile.context_size)] * (len(triggers) - 1)
    assert [c.field for c in run.profile_changes()] == ["trigger_ratio"]
    assert ProfileChange.objects.get().new_value == "0.5"


def test_a_crashing_run_is_marked_failed_and_the_runner_keeps_working(runner):
    bad = runner_module.start_run(CELL, model="no-such-model")
    bad = runner_module.wait_for_run(bad.session_id, 30)

    assert bad.status == RunRecord.FAILED
    assert "SCROLL_MODEL_NAME" in bad.error
    assert bad.ended_at is not None

    good = runner_module.wait_for_run(runner_module.start_run(CELL).session_id, 60)
    assert good.status == RunRecord.DONE, good.error


def test_staff_can_restart_then_stop_a_kernel_and_its_run(runner):
    run = runner_module.start_run(f"{CELL}\n---\n{CELL}", pause_s=30)
    wait_until(lambda: RunRecord.objects.get(pk=run.pk).turns >= 1)
    (status,) = runner_module.kernel_statuses()
    assert status["session_id"] == run.session_id
    assert status["tier"] == "process" and status["alive"]
    assert status["memory_bytes"] > 0
    assert status["worker"] == runner.id

    # The console waits a second; a loaded test machine may need longer to start a kernel.
    answer = send(run.session_id, WorkerCommand.RESTART_KERNEL, within_s=30)
    assert answer.ok, answer.error
    assert answer.data["restarts"] == 1
    assert runner_module.kernel_statuses()[0]["restarts"] == 1

    assert send(run.session_id, WorkerCommand.STOP_KERNEL, within_s=30).ok
    run = runner_module.wait_for_run(run.session_id, 30)

    assert run.status == RunRecord.STOPPED
    assert run.turns == 1
    assert runner_module.kernel_statuses() == []
    answer = runner_module.restart_kernel(run.session_id)
    assert not answer.ok and "no worker owns" in answer.error


@pytest.fixture
def no_bwrap(monkeypatch):
    from scroll_core.kernel import sandbox

    monkeypatch.setattr(sandbox, "bwrap_status", lambda: (False, "bwrap is not installed"))
    monkeypatch.delenv("SCROLL_SANDBOX", raising=False)
    monkeypatch.delenv("SCROLL_SANDBOX_FALLBACK", raising=False)


def test_runs_refuse_a_tier_the_operator_has_not_allowed(console_log, no_bwrap, monkeypatch):
    from scroll_core.errors import SandboxUnavailable

    runner = Worker(slots=1, poll_s=0.05).start()
    try:
        with pytest.raises(SandboxUnavailable, match="SCROLL_SANDBOX_FALLBACK=process"):
            runner_module.start_run(CELL)
        assert RunRecord.objects.count() == 0

        monkeypatch.setenv("SCROLL_SANDBOX_FALLBACK", "process")
        run = runner_module.wait_for_run(runner_module.start_run(CELL).session_id, 60)
        assert run.status == RunRecord.DONE, run.error
    finally:
        runner.shutdown()


def test_the_runs_page_says_why_a_run_did_not_start(
    console_log, no_bwrap, monkeypatch, client, django_user_model
):
    from django.urls import reverse

    runner = Worker(slots=1, poll_s=0.05).start()
    admin = django_user_model.objects.create_superuser("root", password="pw")
    client.force_login(admin)
    try:
        response = client.post(
            reverse("runs"),
            {"task": CELL, "profile": TuningProfile.get_default().pk},
            follow=True,
        )
    finally:
        runner.shutdown()
    assert response.status_code == 400
    assert "Not started" in response.content.decode()
    assert "SCROLL_SANDBOX_FALLBACK=process" in response.content.decode()
    assert RunRecord.objects.count() == 0


def test_kernel_pages_show_the_weaker_tier_and_its_layers(runner, client, django_user_model):
    from django.urls import reverse

    client.force_login(django_user_model.objects.create_user("viewer", password="pw"))
    run = runner_module.start_run(f"{CELL}\n---\n{CELL}", pause_s=30)
    wait_until(lambda: RunRecord.objects.get(pk=run.pk).turns >= 1)
    try:
        (status,) = runner_module.kernel_statuses()
        assert "seccomp" in status["layers"] and "audit_hook" in status["layers"]
        assert ("no_exec" in status["layers"]) == sandbox.no_exec_status()[0]
        kernels = client.get(reverse("kernels")).content.decode()
        session = client.get(reverse("session", args=[run.session_id])).content.decode()
    finally:
        runner_module.stop_run(run.session_id)
        runner_module.wait_for_run(run.session_id, 30)
    for html in (kernels, session):
        assert "(weaker)" in html
        assert status["layers"] in html
