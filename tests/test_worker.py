"""Workers: exclusive claims, lease expiry takeover from the checkpoint with nothing appended
twice, commands answered by the owner, and state any process can show."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from dashboard.eventlog import get_event_log
from dashboard.runs import runner
from dashboard.runs.models import CompressEvent, RunRecord, SessionIndex, WorkerCommand
from dashboard.runs.worker import MAX_ATTEMPTS, Worker, claim_next
from dashboard.runs.worker_commands import send
from scroll_core.kernel import KernelConfig, KernelManager

pytestmark = pytest.mark.django_db(transaction=True)

REPO = Path(__file__).resolve().parents[1]
CELL = "Run this.\n```python\nx = 6 * 7\nprint('answer', x)\n```"


def kernels() -> KernelManager:
    return KernelManager(KernelConfig(sandbox="process"), pool_size=0)


@pytest.fixture
def workers(console_log):
    """Start workers in this process; all are shut down after the test."""
    started: list[Worker] = []

    def start(**options) -> Worker:
        options.setdefault("kernels", kernels())
        options.setdefault("poll_s", 0.05)
        worker = Worker(**options).start()
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.shutdown()


def wait_until(predicate, timeout=60.0, what="the worker"):
    """Poll the database until ``predicate()`` holds: the worker writes the marker."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def child_env() -> dict[str, str]:
    from django.conf import settings
    from django.db import connection

    # The test's own database and channel layer (SQLite or PostgreSQL, memory or Redis).
    keep = {"SCROLL_DATABASE_URL", "SCROLL_REDIS_URL"}
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCROLL_") or k in keep}
    env.update(
        DJANGO_SETTINGS_MODULE="tests.worker_settings",
        SCROLL_TEST_DB_NAME=str(connection.settings_dict["NAME"]),
        SCROLL_DATA_DIR=str(settings.SCROLL_DATA_DIR),
        SCROLL_EVENTLOG_PATH=str(settings.SCROLL_EVENTLOG_PATH),
        SCROLL_SANDBOX="process",
        SCROLL_KERNEL_POOL="0",
    )
    return env


def children(*argvs: list[str]) -> list[str]:
    """Run ``tests.worker_child`` processes, release them together, return their answers."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.worker_child", *argv],
            cwd=REPO,
            env=child_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for argv in argvs
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        answers = [proc.communicate(timeout=120)[0].strip() for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    assert all(proc.returncode == 0 for proc in procs), answers
    return answers


def assert_nothing_appended_twice(log, session_id):
    events = log.session_events(session_id, limit=None)
    keys = Counter(e.dedup_key for e in events)
    assert None not in keys
    assert max(keys.values()) == 1, [k for k, n in keys.items() if n > 1]
    return events


# -- claiming -------------------------------------------------------------------------------
def test_of_threads_claiming_one_run_exactly_one_wins(console_log):
    from django.db import connection

    run = runner.start_run(CELL)
    barrier = threading.Barrier(6)
    won: list[str | None] = [None] * 6

    def claim(i: int) -> None:
        try:
            barrier.wait()
            got = claim_next(f"t{i}")
            won[i] = got.session_id if got else None
        finally:
            connection.close()

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert won.count(run.session_id) == 1 and won.count(None) == 5
    stored = RunRecord.objects.get(pk=run.pk)
    assert stored.status == RunRecord.RUNNING and stored.attempts == 1
    assert stored.worker == f"t{won.index(run.session_id)}"


def test_of_two_processes_claiming_one_run_exactly_one_wins(console_log):
    run = runner.start_run(CELL)
    answers = children(["claim", "p1"], ["claim", "p2"])
    assert sorted(answers) == sorted([run.session_id, "-"])
    assert RunRecord.objects.get(pk=run.pk).worker == ("p1" if answers[0] != "-" else "p2")


def test_a_live_lease_is_not_claimable_and_an_expired_one_is(console_log):
    run = runner.start_run(CELL)
    assert claim_next("a", lease_s=60).pk == run.pk
    assert claim_next("b") is None
    RunRecord.objects.filter(pk=run.pk).update(lease_until=timezone.now() - timedelta(seconds=1))
    # Right after a database outage a worker takes queued runs only (see Worker.tick).
    assert claim_next("b", expired=False) is None
    taken = claim_next("b")
    assert taken is not None and taken.worker == "b" and taken.attempts == 2


# -- takeover -------------------------------------------------------------------------------
def test_a_worker_killed_mid_run_is_taken_over_and_nothing_is_appended_twice(
    console_log, workers, tmp_path
):
    run = runner.start_run(f"{CELL}\n---\n{CELL}\n---\n{CELL}", pause_s=300)
    out = (tmp_path / "worker-a.log").open("w")
    a = subprocess.Popen(
        [sys.executable, "manage.py", "scroll_worker", "--id", "A", "--lease", "2",
         "--poll", "0.05", "--slots", "1"],
        cwd=REPO, env=child_env(), stdout=out, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        # The marker: A checkpointed turn 1 and now waits out the pause before turn 2.
        wait_until(lambda: RunRecord.objects.get(pk=run.pk).checkpoint.get("next_turn") == 1)
        os.kill(a.pid, signal.SIGKILL)
        assert a.wait(timeout=30) == -signal.SIGKILL
    finally:
        if a.poll() is None:
            a.kill()
        out.close()
    killed = RunRecord.objects.get(pk=run.pk)
    assert (killed.status, killed.worker, killed.turns) == (RunRecord.RUNNING, "A", 1)
    # The operator shortens the pause so the test need not wait it out on the next worker.
    RunRecord.objects.filter(pk=run.pk).update(options=killed.options | {"pause_s": 0})

    workers(worker_id="B")
    run = runner.wait_for_run(run.session_id, 120)

    assert run.status == RunRecord.DONE, run.error
    assert (run.worker, run.attempts, run.turns) == ("B", 2, 3)
    events = assert_nothing_appended_twice(console_log, run.session_id)
    assert sum(1 for e in events if e.role == "user") == 3
    compressions = list(CompressEvent.objects.filter(run=run).values_list("turn", "step"))
    assert len(compressions) == 9  # turn start + after each of two steps, per turn, once
    assert sorted({turn for turn, _ in compressions}) == [1, 2, 3]
    assert run.steps == 6  # the counters went back to the checkpoint's, then on once


def test_a_run_whose_worker_stalled_mid_turn_is_finished_by_another_from_the_log(workers):
    entered, release = threading.Event(), threading.Event()

    def hold() -> str:
        entered.set()
        release.wait(60)
        return "released"

    task = f"{CELL}\n---\nWait for it.\n```python\nprint(ops.hold())\n```"
    run = runner.start_run(task, host_functions={"ops.hold": hold})
    stalled = workers(worker_id="stalled", lease_s=1)
    assert entered.wait(60)  # the stalled worker is inside turn 2's cell
    stalled._halt.set()  # its loop stops: no heartbeat renews the lease any more

    workers(worker_id="B", lease_s=10)
    wait_until(lambda: RunRecord.objects.get(pk=run.pk).worker == "B")
    release.set()
    run = runner.wait_for_run(run.session_id, 60)

    assert run.status == RunRecord.DONE, run.error
    assert (run.worker, run.turns) == ("B", 2)
    events = assert_nothing_appended_twice(get_event_log(), run.session_id)
    results = [e for e in events if e.kind == "tool_result" and "released" in e.content]
    assert len(results) == 1
    # The stalled worker's late writes were refused: the run is B's, counted once.
    assert CompressEvent.objects.filter(run=run, turn=2).count() == 3


def test_a_run_claimed_too_often_is_failed_with_the_reason(workers):
    run = runner.start_run(CELL)
    expired = timezone.now() - timedelta(seconds=1)
    RunRecord.objects.filter(pk=run.pk).update(
        status=RunRecord.RUNNING, worker="gone", lease_until=expired, attempts=MAX_ATTEMPTS
    )
    workers()
    run = runner.wait_for_run(run.session_id, 30)
    assert run.status == RunRecord.FAILED
    assert f"lease expired {MAX_ATTEMPTS} times" in run.error


def test_a_run_pinned_to_a_process_that_stopped_is_failed_with_the_reason(workers):
    run = runner.start_run(CELL)
    RunRecord.objects.filter(pk=run.pk).update(
        status=RunRecord.RUNNING, worker="gone", pinned_to="elsewhere:1:abc",
        lease_until=timezone.now() - timedelta(seconds=1),
    )  # fmt: skip
    workers()
    run = runner.wait_for_run(run.session_id, 30)
    assert run.status == RunRecord.FAILED
    assert "elsewhere:1:abc" in run.error and "host functions" in run.error


# -- commands -------------------------------------------------------------------------------
def test_the_owning_worker_answers_status_and_digest_then_stops_the_run(workers):
    worker = workers()
    run = runner.start_run(f"{CELL}\n---\n{CELL}", pause_s=300)
    wait_until(lambda: RunRecord.objects.get(pk=run.pk).turns >= 1)

    # within_s: the console waits a second; a loaded test machine may be slower.
    status = send(run.session_id, WorkerCommand.KERNEL_STATUS, within_s=30)
    assert status.ok, status.error
    assert status.worker == worker.id and status.data["alive"] and status.data["cells"] >= 1
    digest = send(run.session_id, WorkerCommand.DIGEST, within_s=30)
    assert digest.ok and "x" in digest.data["digest"]

    assert send(run.session_id, WorkerCommand.STOP, within_s=30).ok
    run = runner.wait_for_run(run.session_id, 30)
    assert (run.status, run.turns) == (RunRecord.STOPPED, 1)
    assert WorkerCommand.objects.filter(state=WorkerCommand.DONE).count() == 3


def test_a_command_for_a_run_no_worker_owns_says_so(console_log):
    queued = runner.start_run(CELL)
    answer = send(queued.session_id, WorkerCommand.STOP)
    assert not answer.ok and "no worker owns" in answer.error

    RunRecord.objects.filter(pk=queued.pk).update(
        status=RunRecord.RUNNING, worker="gone",
        lease_until=timezone.now() - timedelta(seconds=1),
    )  # fmt: skip
    answer = send(queued.session_id, WorkerCommand.KERNEL_STATUS)
    assert not answer.ok and "no worker owns" in answer.error
    assert WorkerCommand.objects.count() == 0  # nothing left for a worker to act on later


def test_a_command_an_owner_does_not_take_in_time_is_withdrawn(console_log):
    run = runner.start_run(CELL)
    RunRecord.objects.filter(pk=run.pk).update(
        status=RunRecord.RUNNING, worker="silent",
        lease_until=timezone.now() + timedelta(seconds=60),
    )  # fmt: skip
    answer = send(run.session_id, WorkerCommand.RESTART_KERNEL, within_s=0.2)
    assert not answer.ok and "silent did not take it" in answer.error
    assert WorkerCommand.objects.get().state == WorkerCommand.EXPIRED


def test_an_unknown_action_is_refused(console_log):
    with pytest.raises(ValueError, match="unknown worker action"):
        send("any", "reboot")


# -- what any process shows ------------------------------------------------------------------
def test_the_index_is_persisted_and_shown_by_a_fresh_process(workers, django_user_model):
    from dashboard.runs.models import TuningProfile

    tiny = TuningProfile.objects.create(name="tiny", context_size=3000)
    turns = "\n---\n".join(f"Print {k}.\n```python\nprint('{k}' * 2000)\n```" for k in range(8))
    worker = workers()
    run = runner.wait_for_run(runner.start_run(turns, tiny).session_id, 120)
    assert run.status == RunRecord.DONE, run.error
    worker.shutdown()
    saved = SessionIndex.objects.get(session_id=run.session_id)
    assert saved.blocks >= 1

    django_user_model.objects.create_user("viewer", password="pw")
    (rows,) = children(["page", run.session_id, "viewer"])
    assert int(rows) == saved.blocks == len(runner.session_index(run.session_id))


def test_the_demo_is_queued_once_per_data_folder(console_log):
    from dashboard.runs.demo import start_demo_once

    answers = children(["demo"], ["demo"])
    assert sorted(a == "-" for a in answers) == [False, True]
    assert start_demo_once(pause_s=0) is None
    assert RunRecord.objects.filter(kind="demo").count() == 1


def test_a_serving_process_starting_leaves_other_processes_runs_alone(console_log, settings):
    from dashboard import apps

    settings.SCROLL_WORKERS = "external"
    run = runner.start_run(CELL)
    lease = timezone.now() + timedelta(seconds=60)
    RunRecord.objects.filter(pk=run.pk).update(
        status=RunRecord.RUNNING, worker="other", lease_until=lease
    )
    apps._after_start()
    run.refresh_from_db()
    assert (run.status, run.worker, run.error) == (RunRecord.RUNNING, "other", "")


def test_a_kernel_whose_worker_died_is_not_shown_as_live(console_log):
    from dashboard.runs.models import KernelState

    run = runner.start_run(CELL)
    KernelState.objects.create(session_id=run.session_id, worker="w1", alive=True, pid=1)
    RunRecord.objects.filter(pk=run.pk).update(
        status=RunRecord.RUNNING, worker="w1", lease_until=timezone.now() + timedelta(seconds=60)
    )
    assert [k["session_id"] for k in runner.kernel_statuses()] == [run.session_id]
    assert runner.kernel_state(run.session_id)["alive"]

    RunRecord.objects.filter(pk=run.pk).update(lease_until=timezone.now() - timedelta(seconds=1))
    assert runner.kernel_statuses() == []
    state = runner.kernel_state(run.session_id)
    assert not state["alive"] and state["last_status"] == "its worker stopped"


def test_stopping_a_queued_run_cancels_it_before_any_worker_takes_it(console_log):
    run = runner.start_run(CELL)
    answer = runner.stop_run(run.session_id)
    assert answer.ok and answer.data["before_start"]
    assert RunRecord.objects.get(pk=run.pk).status == RunRecord.STOPPED
    assert claim_next("late") is None


def test_a_run_stopped_mid_turn_has_that_turn_marked_interrupted(workers):
    from scroll_core.agent.interrupted import INTERRUPTED_KEY

    workers()
    slow = "Run this.\n```python\nimport time\ntime.sleep(1.5)\nprint('slept')\n```"
    run = runner.start_run(slow)

    def in_the_cell() -> bool:
        events = get_event_log().session_events(run.session_id, limit=None)
        return any((e.dedup_key or "").endswith(":t1:s1:call0") for e in events)

    wait_until(in_the_cell, what="the first cell")
    assert send(run.session_id, WorkerCommand.STOP, within_s=30).ok
    run = runner.wait_for_run(run.session_id, 30)
    assert (run.status, run.turns) == (RunRecord.STOPPED, 0)
    events = get_event_log().session_events(run.session_id, limit=None)
    marker = events[-1]
    assert (marker.role, marker.metadata[INTERRUPTED_KEY]["reason"]) == (
        "system", "the run was stopped"
    )  # fmt: skip
    turn = [e for e in events[:-1] if ":t1:" in (e.dedup_key or "")]
    assert marker.metadata[INTERRUPTED_KEY]["seqs"] == [e.seq for e in turn]
    # The stop came after the cell reported: its call has its one result, nothing added.
    assert [e.kind for e in turn].count("tool_result") == 1


def test_a_serving_process_opens_the_event_log_at_start_up(settings, tmp_path):
    # Opening loads the tokenizer: done at start-up, the first gateway request does not wait.
    from dashboard import apps, eventlog

    settings.SCROLL_WORKERS = "external"
    settings.SCROLL_EVENTLOG_PATH = tmp_path / "started.db"  # a log nobody opened yet
    assert not eventlog._logs
    apps._after_start()
    assert [key[0] for key in eventlog._logs] == [str(tmp_path / "started.db")]
    assert (tmp_path / "started.db").exists()
