"""Runs as the web processes see them: enqueue a run, and act on it through its worker.

``start_run(task, profile, model)`` only records a queued ``RunRecord`` holding everything a
worker needs (the turns, the options, the named host function set); a worker
(``manage.py scroll_worker``, or the embedded one ``make run`` starts in the serving process)
claims it and drives one ``scroll_core`` agent ``Session`` over the turns of the task (the
task's text split on lines holding only ``---``). See ``dashboard.worker``.

Stop, kernel restart and kernel stop reach the run's owner through ``dashboard.worker_commands``
from any process; kernel status, the namespace digest and the index are read from the rows the
worker keeps up to date, never from this process's memory.
"""

from __future__ import annotations

import os
import secrets
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from django.conf import settings
from django.utils import timezone

from dashboard import worker_commands
from dashboard.models import KernelState, RunRecord, SessionIndex, TuningProfile, WorkerCommand
from dashboard.worker import (
    PROCESS_TOKEN,
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
) -> RunRecord:
    """Queue a run and return its RunRecord (status queued); a worker picks it up.

    ``host_set`` names functions every worker can bind (``demo``). ``host_functions`` live
    in this process's memory, so the run is pinned to this process's embedded worker.
    """
    require_allowed_tier()
    turns = list(turns) if turns is not None else split_task(task)
    if not turns:
        raise ValueError("a run needs a task with at least one non-empty turn")
    profile = profile or TuningProfile.get_default()
    session_id = session_id or _new_session_id(kind)
    if host_functions:
        pin_host_functions(session_id, host_functions)
    return RunRecord.objects.create(
        session_id=session_id,
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


def _new_session_id(kind: str) -> str:
    return f"{kind}:{timezone.now():%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"


def wait_for_run(session_id: str, timeout: float = 60.0) -> RunRecord:
    """The run once it has ended, or as it is when ``timeout`` seconds have passed."""
    deadline = time.monotonic() + timeout
    while True:
        run = RunRecord.objects.get(session_id=session_id)
        if not run.active or time.monotonic() >= deadline:
            return run
        time.sleep(0.05)


def stop_run(session_id: str) -> worker_commands.Answer:
    """Ask the run's worker to stop it after its current step."""
    return worker_commands.send(session_id, WorkerCommand.STOP)


def restart_kernel(session_id: str) -> worker_commands.Answer:
    """Restart the session's kernel (its variables are lost), through its worker."""
    return worker_commands.send(session_id, WorkerCommand.RESTART_KERNEL)


def stop_kernel(session_id: str) -> worker_commands.Answer:
    """Stop the session's kernel and the run using it, through its worker."""
    return worker_commands.send(session_id, WorkerCommand.STOP_KERNEL)


def kernel_statuses() -> list[dict[str, Any]]:
    """Every live kernel as its worker last recorded it (the Kernels page)."""
    return [k.to_row() for k in KernelState.objects.filter(alive=True)]


def kernel_state(session_id: str) -> dict[str, Any] | None:
    found = KernelState.objects.filter(session_id=session_id).first()
    return found.to_row() if found is not None else None


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
