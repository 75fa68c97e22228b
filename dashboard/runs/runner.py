"""Runs as the web processes see them: enqueue a run, and act on it through its worker.

``start_run(task, profile, model)`` only records a queued ``RunRecord`` holding everything a
worker needs (the turns, the options, the named host function set); a worker
(``manage.py scroll_worker``, or the embedded one ``make run`` starts in the serving process)
claims it and drives one ``scroll_core`` agent ``Session`` over the turns of the task (the
task's text split on lines holding only ``---``). See ``dashboard.runs.worker``.

Each run is its own agent in the Event Log (``run-<id>``, ``demo-<id>`` for the demo), so
what one run recalls is its own memory, unless the caller names an existing agent to continue.
A task's fenced ```python blocks are executed only when the run may run task code: runs the
server starts itself (``user=None``: the demo, commands) may; a user's run may when the user
holds ``runs.run_task_code``. Otherwise the run's first event says the code will not run.

Stop, kernel restart and kernel stop reach the run's owner through ``worker_commands`` from
any process; kernel status, the namespace digest and the index are read from the rows the
worker keeps up to date, never from this process's memory.
"""

from __future__ import annotations

import os
import secrets
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from dashboard.runs import worker_commands
from dashboard.runs.models import KernelState, RunRecord, SessionIndex, TuningProfile, WorkerCommand
from dashboard.runs.permissions import RUN_TASK_CODE
from dashboard.runs.worker import (
    PROCESS_TOKEN,
    TASK_CODE_OFF,
    RunStopped,
    Worker,
    make_model,
    model_endpoint_configured,
    pin_host_functions,
)
from scroll_core.index import EvictionIndex
from scroll_core.kernel import Kernel, KernelConfig
from scroll_core.models import POLICY_NAME

__all__ = [
    "TASK_CODE_OFF",
    "RunStopped",
    "available_models",
    "embedded_worker",
    "get_runner",
    "kernel_statuses",
    "make_model",
    "require_allowed_tier",
    "restart_kernel",
    "session_index",
    "shutdown_runner",
    "split_task",
    "start_embedded_worker",
    "start_run",
    "stop_kernel",
    "stop_run",
    "wait_for_run",
]

TURN_SEPARATOR = "---"
DEFAULT_MAX_STEPS = 8


def split_task(task: str) -> list[str]:
    """The turns of a task: its text split on lines that hold only ``---``."""
    turns: list[str] = []
    current: list[str] = []
    for line in task.splitlines():
        if line.strip() == TURN_SEPARATOR:
            turns.append("\n".join(current).strip())
            current = []
        else:
            current.append(line)
    turns.append("\n".join(current).strip())
    return [t for t in turns if t]


def available_models() -> list[str]:
    """Model names a run may choose: the policy baseline, and the configured endpoint's."""
    names = [POLICY_NAME]
    if model_endpoint_configured():
        names.append(os.environ["SCROLL_MODEL_NAME"].strip())
    return names


def require_allowed_tier() -> str:
    """The tier runs' kernels use; SandboxUnavailable when the operator has not allowed it
    (``auto`` without bubblewrap and without ``SCROLL_SANDBOX_FALLBACK=process``)."""
    return Kernel.resolve(KernelConfig.from_env())


def start_run(
    task: str,
    profile: TuningProfile | None = None,
    model: str | None = None,
    *,
    user: Any = None,
    session_id: str | None = None,
    kind: str = "task",
    turns: Sequence[str] | None = None,
    host_functions: Mapping[str, Callable[..., Any]] | None = None,
    host_set: str = "",
    max_steps: int = DEFAULT_MAX_STEPS,
    pause_s: float = 0.0,
    agent_id: str | None = None,
    task_code: bool | None = None,
) -> RunRecord:
    """Queue a run and return its RunRecord (status queued); a worker picks it up.

    ``host_set`` names functions every worker can bind (``demo``). ``host_functions`` live
    in this process's memory, so the run is pinned to this process's embedded worker.
    ``agent_id`` continues that agent's memory (default: a new agent for this run);
    ``task_code`` says whether fenced code in the task runs (default: only for runs the
    server starts itself, or a user holding ``runs.run_task_code``).
    """
    require_allowed_tier()
    turns = list(turns) if turns is not None else split_task(task)
    if not turns:
        raise ValueError("a run needs a task with at least one non-empty turn")
    profile = profile or TuningProfile.get_default()
    token = secrets.token_hex(4)
    session_id = session_id or _new_session_id(kind, token)
    if task_code is None:
        task_code = user is None or bool(user.has_perm(RUN_TASK_CODE))
    if host_functions:
        pin_host_functions(session_id, host_functions)
    return RunRecord.objects.create(
        session_id=session_id,
        agent_id=agent_id or _new_agent_id(kind, token),
        task_code=task_code,
        task=task,
        kind=kind,
        profile=profile,
        model_name=model or POLICY_NAME,
        created_by=user if getattr(user, "is_authenticated", False) else None,
        context_size=profile.context_size,
        plan=turns,
        options={"max_steps": max_steps, "pause_s": pause_s, "host_set": host_set},
        pinned_to=PROCESS_TOKEN if host_functions else "",
    )


def _new_session_id(kind: str, token: str) -> str:
    return f"{kind}:{timezone.now():%Y%m%d-%H%M%S}-{token}"


def _new_agent_id(kind: str, token: str) -> str:
    """A fresh agent for one run: the demo's ``demo-…``, any other run's ``run-…``."""
    return f"{'demo' if kind == 'demo' else 'run'}-{token}"


def wait_for_run(session_id: str, timeout: float = 60.0) -> RunRecord:
    """The run once it has ended, or as it is when ``timeout`` seconds have passed."""
    deadline = time.monotonic() + timeout
    while True:
        run = RunRecord.objects.get(session_id=session_id)
        if not run.active or time.monotonic() >= deadline:
            return run
        time.sleep(0.05)


def stop_run(session_id: str) -> worker_commands.Answer:
    """Stop a queued run at once, or ask a running one's worker to stop it after its
    current step."""
    cancelled = RunRecord.objects.filter(session_id=session_id, status=RunRecord.QUEUED).update(
        status=RunRecord.STOPPED, ended_at=timezone.now()
    )
    if cancelled:
        return worker_commands.Answer(True, {"stopped": True, "before_start": True})
    return worker_commands.send(session_id, WorkerCommand.STOP)


def restart_kernel(session_id: str) -> worker_commands.Answer:
    """Restart the session's kernel (its variables are lost), through its worker."""
    return worker_commands.send(session_id, WorkerCommand.RESTART_KERNEL)


def stop_kernel(session_id: str) -> worker_commands.Answer:
    """Stop the session's kernel and the run using it, through its worker."""
    return worker_commands.send(session_id, WorkerCommand.STOP_KERNEL)


def kernel_statuses() -> list[dict[str, Any]]:
    """Every live kernel as its worker last recorded it (the Kernels page). A kernel whose
    worker no longer holds its run's lease died with that worker, so it is left out."""
    rows = []
    for state in KernelState.objects.filter(alive=True):
        row = state.to_row()
        if _owner_alive(state):
            rows.append(row)
    return rows


def kernel_state(session_id: str) -> dict[str, Any] | None:
    """The session's kernel as last recorded (marked stopped if its worker is gone)."""
    found = KernelState.objects.filter(session_id=session_id).first()
    if found is None:
        return None
    row = found.to_row()
    if row["alive"] and not _owner_alive(found):
        row.update(alive=False, last_status="its worker stopped", uptime_s=0.0)
    return row


def _owner_alive(state: KernelState) -> bool:
    if state.gateway:
        # Its web process rewrites the row every third of a lease while it lives.
        since = timezone.now() - timedelta(seconds=settings.SCROLL_WORKER_LEASE_S)
        return state.updated_at >= since
    return worker_commands.owner_of(state.session_id) == state.worker


def session_index(session_id: str) -> EvictionIndex | None:
    """The session's eviction index as saved at its last compress, else None."""
    found = SessionIndex.objects.filter(session_id=session_id).first()
    if found is None or not found.data:
        return None
    return EvictionIndex.from_checkpoint(found.data)


# -- the embedded worker: `make run`'s one-command default ----------------------------------
_embedded_lock = threading.Lock()
_embedded: Worker | None = None


def start_embedded_worker(**options: Any) -> Worker:
    """Start this process's worker thread once (options as ``Worker``'s)."""
    global _embedded
    with _embedded_lock:
        if _embedded is None:
            options.setdefault("slots", int(getattr(settings, "SCROLL_RUNNER_WORKERS", 4)))
            options.setdefault("kernel_pool", int(getattr(settings, "SCROLL_KERNEL_POOL", 1)))
            _embedded = Worker(**options).start()
        return _embedded


def embedded_worker() -> Worker | None:
    return _embedded


def get_runner() -> Worker:
    """The embedded worker, started on first use."""
    return start_embedded_worker()


def shutdown_runner() -> None:
    global _embedded
    with _embedded_lock:
        worker, _embedded = _embedded, None
    if worker is not None:
        worker.shutdown()
