"""Runs agent sessions outside the request cycle: a small thread pool inside the server.

``start_run(task, profile, model)`` records a ``RunRecord`` and hands the run to a worker
thread, which drives one ``scroll_core`` agent ``Session`` over the turns of the task (the
task's text split on lines holding only ``---``). Each session gets one kernel from the
process-wide ``KernelManager``. The model is the deterministic policy model unless an
OpenAI-compatible endpoint is configured (``SCROLL_MODEL_NAME``, with
``SCROLL_MODEL_BASE_URL`` / ``SCROLL_MODEL_API_KEY``), and then either can be chosen.

Each run is its own agent in the Event Log (``run-<id>``, ``demo-<id>`` for the demo), so
what one run recalls is its own memory, unless the caller names an existing agent to continue.
A task's fenced ```python blocks are executed only when the run may run task code: runs the
server starts itself (``user=None``: the demo, commands) may; a user's run may when the user
holds ``dashboard.run_task_code``. Otherwise the run's first event says the code will not run.

Before every compress the session re-reads its profile from the database, so an edit in
admin applies at the next compress. Every compress is saved as a ``CompressEvent`` and the
run's counters are pushed to the console as ``session.changed``. A run that raises, or
whose kernel cannot start, is marked failed with the error; nothing escapes the worker.
Staff stop runs and restart or stop kernels through the functions at the bottom.
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
import time
import traceback
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connection
from django.utils import timezone

from dashboard.eventlog import get_event_log
from dashboard.grants import readable_by
from dashboard.models import CompressEvent, RunRecord, TuningProfile
from dashboard.permissions import RUN_TASK_CODE
from dashboard.profiles import core_profile
from dashboard.spans import push_session
from scroll_core import telemetry
from scroll_core.agent import Session, StepRecord
from scroll_core.eventlog import KIND_CONTEXT_MSG
from scroll_core.kernel import KernelConfig, KernelManager
from scroll_core.models import POLICY_NAME, OpenAICompatibleModel, PolicyModel
from scroll_core.profile import Profile

__all__ = [
    "RunStopped",
    "Runner",
    "available_models",
    "get_runner",
    "kernel_statuses",
    "restart_kernel",
    "session_index",
    "shutdown_runner",
    "split_task",
    "start_run",
    "stop_kernel",
    "stop_run",
    "wait_for_run",
]

log = logging.getLogger("dashboard.runner")

TURN_SEPARATOR = "---"
DEFAULT_WORKERS = 4
DEFAULT_MAX_STEPS = 8
# Finished sessions keep their index in memory for the session page, newest this many.
KEEP_FINISHED = 50


class RunStopped(Exception):
    """Raised inside a run's step callback when staff asked the run to stop."""


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


def model_endpoint_configured(env: Mapping[str, str] | None = None) -> bool:
    env = os.environ if env is None else env
    return bool(env.get("SCROLL_MODEL_NAME", "").strip())


def available_models() -> list[str]:
    """Model names a run may choose: the policy baseline, and the configured endpoint's."""
    names = [POLICY_NAME]
    if model_endpoint_configured():
        names.append(os.environ["SCROLL_MODEL_NAME"].strip())
    return names


def make_model(name: str | None, profile: Profile, *, task_code: bool = True) -> Any:
    """The policy model for ``None`` or its own name, else the OpenAI-compatible client.

    ``task_code=False`` stops the policy model executing the task's fenced code."""
    if not name or name == POLICY_NAME:
        return PolicyModel(context_size=profile.context_size, task_code=task_code)
    if not model_endpoint_configured():
        raise ValueError(f"model {name!r} needs SCROLL_MODEL_NAME (an endpoint) configured")
    return OpenAICompatibleModel(name, context_size=profile.context_size)


class _Live:
    """What the runner keeps about one running session."""

    def __init__(self, run_id: int, session_id: str) -> None:
        self.run_id = run_id
        self.session_id = session_id
        self.stop = threading.Event()
        self.session: Session | None = None
        self.future: Future[None] | None = None
        self.last_status = ""


class Runner:
    """The in-process runner; one per server process (``get_runner()``)."""

    def __init__(
        self, *, workers: int = DEFAULT_WORKERS, kernels: KernelManager | None = None
    ) -> None:
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="scroll-run")
        self._kernels = kernels
        self._lock = threading.Lock()
        self._live: dict[str, _Live] = {}
        self._finished: OrderedDict[str, Any] = OrderedDict()
        self._last_status: dict[str, str] = {}

    # -- kernels -------------------------------------------------------------------------
    @property
    def kernels(self) -> KernelManager:
        with self._lock:
            if self._kernels is None:
                pool = int(getattr(settings, "SCROLL_KERNEL_POOL", 1))
                self._kernels = KernelManager(KernelConfig.from_env(), pool_size=pool)
            return self._kernels

    # -- runs ----------------------------------------------------------------------------
    def start(
        self,
        task: str,
        profile: TuningProfile | None = None,
        model: str | None = None,
        *,
        user: Any = None,
        session_id: str | None = None,
        kind: str = "task",
        turns: Sequence[str] | None = None,
        host_functions: Mapping[str, Callable[..., Any]] | None = None,
        max_steps: int = DEFAULT_MAX_STEPS,
        pause_s: float = 0.0,
        agent_id: str | None = None,
        task_code: bool | None = None,
    ) -> RunRecord:
        """Record a run and hand it to a worker; see the module docstring.

        ``agent_id`` continues that agent's memory (default: a new agent for this run);
        ``task_code`` says whether fenced code in the task runs (default: only for runs the
        server starts itself, or a user holding ``dashboard.run_task_code``).
        """
        self.require_allowed_tier()
        turns = list(turns) if turns is not None else split_task(task)
        if not turns:
            raise ValueError("a run needs a task with at least one non-empty turn")
        profile = profile or TuningProfile.get_default()
        token = secrets.token_hex(4)
        session_id = session_id or _new_session_id(kind, token)
        if task_code is None:
            task_code = user is None or bool(user.has_perm(RUN_TASK_CODE))
        run = RunRecord.objects.create(
            session_id=session_id,
            agent_id=agent_id or _new_agent_id(kind, token),
            task_code=task_code,
            task=task,
            kind=kind,
            profile=profile,
            model_name=model or POLICY_NAME,
            created_by=user if getattr(user, "is_authenticated", False) else None,
            context_size=profile.context_size,
        )
        live = _Live(run.pk, session_id)
        with self._lock:
            self._live[session_id] = live
        live.future = self._executor.submit(
            self._execute, live, turns, model, dict(host_functions or {}), max_steps, pause_s
        )
        return run

    def require_allowed_tier(self) -> str:
        """The tier runs' kernels use; SandboxUnavailable when the operator has not allowed
        it (``auto`` without bubblewrap and without ``SCROLL_SANDBOX_FALLBACK=process``)."""
        return self.kernels.tier

    def _execute(
        self,
        live: _Live,
        turns: list[str],
        model_name: str | None,
        host_functions: dict[str, Callable[..., Any]],
        max_steps: int,
        pause_s: float,
    ) -> None:
        close_old_connections()
        run = RunRecord.objects.get(pk=live.run_id)
        session: Session | None = None
        try:
            run.status, run.started_at = RunRecord.RUNNING, timezone.now()
            run.save(update_fields=["status", "started_at"])
            push_session(run)
            profile_id = run.profile_id
            profile = core_profile(profile_id)
            model = make_model(model_name, profile, task_code=run.task_code)
            if not run.task_code:
                _note_task_code_off(run)
            session = Session(
                get_event_log(),
                model,
                session_id=live.session_id,
                agent_id=run.agent_id,
                profile=profile,
                kernels=self.kernels,
                max_steps=max_steps,
                on_step=lambda record: self._on_step(live, run, record),
                # Re-read before every compress: an admin change applies at the next one.
                profile_source=lambda: core_profile(profile_id),
                # Off by default; an operator's live grants, asked at every ms call.
                readable_agents=readable_by,
            )
            live.session = session
            with telemetry.session_scope(live.session_id):
                if host_functions:
                    kernel = session.kernel
                    assert kernel is not None
                    kernel.register(host_functions)
                for i, text in enumerate(turns):
                    if live.stop.is_set():
                        raise RunStopped()
                    if i and pause_s:
                        live.stop.wait(pause_s)
                        if live.stop.is_set():
                            raise RunStopped()
                    result = session.ask(text)
                    run.turns += 1
                    run.last_answer = (result.answer or result.error or "")[:4000]
                    run.save(update_fields=["turns", "last_answer"])
                    if result.stop_reason in ("context_unfit", "model_error", "context_overflow"):
                        raise RuntimeError(f"{result.stop_reason}: {result.error}")
            run.status = RunRecord.DONE
        except RunStopped:
            run.status = RunRecord.STOPPED
        except Exception as exc:
            log.exception("runner: run %s failed", live.session_id)
            run.status = RunRecord.FAILED
            run.error = f"{type(exc).__name__}: {exc}\n" + traceback.format_exc(limit=8)[-4000:]
        finally:
            try:
                self._finish(live, run, session)
            except Exception:
                log.exception("runner: finishing run %s failed", live.session_id)
            connection.close()

    def _finish(self, live: _Live, run: RunRecord, session: Session | None) -> None:
        with self._lock:
            self._live.pop(live.session_id, None)
            if session is not None:
                self._finished[live.session_id] = session.state.index
                while len(self._finished) > KEEP_FINISHED:
                    self._finished.popitem(last=False)
        if session is not None:
            session.close()
        if self._kernels is not None:
            self._kernels.release(live.session_id)
        run.ended_at = timezone.now()
        run.save()
        push_session(run)

    def _on_step(self, live: _Live, run: RunRecord, record: StepRecord) -> None:
        session = live.session
        index = session.state.index if session is not None else None
        rows = []
        for item in record.compressions:
            c = item.record
            report = c.view.report if c.view is not None else None
            row = CompressEvent.from_step(
                run, live.session_id, record.turn, record.step, item, index
            )
            rows.append(row)
            run.evictions += 1 if c.evicted else 0
            run.folds += row.folds
            run.view_tokens = c.tokens_after
            run.trigger_tokens = c.trigger_tokens
            if report is not None:
                run.context_size = report.context_size
                run.last_report = report.to_dict()
        CompressEvent.objects.bulk_create(rows)
        for tool in record.tools:
            live.last_status = tool.status
            run.expands += sum(1 for call in tool.ms_calls if call.name == "expand")
        run.steps += 1
        run.save()
        push_session(run)
        if live.stop.is_set():
            raise RunStopped()

    def wait(self, session_id: str, timeout: float = 60.0) -> bool:
        with self._lock:
            live = self._live.get(session_id)
        if live is None or live.future is None:
            return True
        try:
            live.future.result(timeout)
        except TimeoutError:
            return False
        return True

    def stop(self, session_id: str) -> bool:
        """Ask a run to stop after its current step; False when it is not running here."""
        with self._lock:
            live = self._live.get(session_id)
        if live is None:
            return False
        live.stop.set()
        return True

    # -- kernels, for the Kernels page ---------------------------------------------------
    def kernel_statuses(self) -> list[dict[str, Any]]:
        if self._kernels is None:
            return []
        sessions = self._kernels.status()["sessions"]
        now = time.time()
        rows = []
        for session_id, status in sorted(sessions.items()):
            with self._lock:
                live = self._live.get(session_id)
            session = live.session if live else None
            digest = getattr(session, "digest", None)
            rows.append(
                {
                    "session_id": session_id,
                    "tier": status.tier,
                    "strength": status.strength,
                    "layers": ", ".join(status.layers),
                    "missing_layers": list(status.missing_layers),
                    "alive": status.alive,
                    "pid": status.pid,
                    "memory_bytes": _rss_bytes(status.pid) if status.alive else None,
                    "uptime_s": round(now - status.started_at, 1) if status.started_at else 0,
                    "cells": status.cells,
                    "restarts": status.restarts,
                    "last_status": (live.last_status if live else "") or "idle",
                    "digest": digest.render() if digest is not None else "",
                    "running": live is not None,
                }
            )
        return rows

    def _kernel(self, session_id: str) -> Any:
        if self._kernels is None or session_id not in self._kernels.status()["sessions"]:
            raise LookupError(f"no kernel for session {session_id!r}")
        return self._kernels.get(session_id)

    def restart_kernel(self, session_id: str) -> None:
        """Restart the session's kernel (its variables are lost); LookupError if none."""
        kernel = self._kernel(session_id)
        with telemetry.span(
            "scroll.kernel.restart", session=session_id, kernel_tier=kernel.tier, by="staff"
        ):
            kernel.restart()

    def stop_kernel(self, session_id: str) -> None:
        """Stop the session's kernel and the run using it; LookupError if none."""
        self._kernel(session_id)
        self.stop(session_id)
        assert self._kernels is not None
        self._kernels.release(session_id)

    def session_index(self, session_id: str) -> Any:
        with self._lock:
            live = self._live.get(session_id)
            if live is not None and live.session is not None:
                return live.session.state.index
            return self._finished.get(session_id)

    def shutdown(self) -> None:
        with self._lock:
            lives = list(self._live.values())
        for live in lives:
            live.stop.set()
        self._executor.shutdown(wait=True, cancel_futures=True)
        if self._kernels is not None:
            self._kernels.shutdown()


def _new_session_id(kind: str, token: str) -> str:
    return f"{kind}:{timezone.now():%Y%m%d-%H%M%S}-{token}"


def _new_agent_id(kind: str, token: str) -> str:
    """A fresh agent for one run: the demo's ``demo-…``, any other run's ``run-…``."""
    return f"{'demo' if kind == 'demo' else 'run'}-{token}"


TASK_CODE_OFF = (
    "Task code is off for this run: it was started by a user without the run_task_code "
    "permission, so fenced python blocks in the task are not executed. Answer from the Event "
    "Log only, and do not run code the task gives you."
)


def _note_task_code_off(run: RunRecord) -> None:
    """The run's first event: the task's code will not run, and why (model and console see it)."""
    get_event_log().append(
        session_id=run.session_id,
        agent_id=run.agent_id,
        kind=KIND_CONTEXT_MSG,
        role="system",
        content=TASK_CODE_OFF,
        metadata={"scroll.task_code": False},
        dedup_key="run:task-code-off",
    )


def _rss_bytes(pid: int | None) -> int | None:
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    return None


def recover_stale_runs() -> int:
    """Runs left queued or running by a previous server process are marked failed."""
    return RunRecord.objects.filter(status__in=RunRecord.ACTIVE).update(
        status=RunRecord.FAILED, error="the server stopped while this run was active",
        ended_at=timezone.now(),
    )  # fmt: skip


# -- the process-wide runner and the functions the views call -----------------------------
_runner_lock = threading.Lock()
_runner: Runner | None = None


def get_runner() -> Runner:
    global _runner
    with _runner_lock:
        if _runner is None:
            workers = int(getattr(settings, "SCROLL_RUNNER_WORKERS", DEFAULT_WORKERS))
            _runner = Runner(workers=workers)
        return _runner


def shutdown_runner() -> None:
    global _runner
    with _runner_lock:
        runner, _runner = _runner, None
    if runner is not None:
        runner.shutdown()


def start_run(
    task: str, profile: TuningProfile | None = None, model: str | None = None, **options: Any
) -> RunRecord:
    """Start a run in the background and return its RunRecord (status queued)."""
    return get_runner().start(task, profile, model, **options)


def stop_run(session_id: str) -> bool:
    return get_runner().stop(session_id)


def wait_for_run(session_id: str, timeout: float = 60.0) -> RunRecord:
    get_runner().wait(session_id, timeout)
    return RunRecord.objects.get(session_id=session_id)


def kernel_statuses() -> list[dict[str, Any]]:
    return get_runner().kernel_statuses() if _runner is not None else []


def restart_kernel(session_id: str) -> None:
    get_runner().restart_kernel(session_id)


def stop_kernel(session_id: str) -> None:
    get_runner().stop_kernel(session_id)


def session_index(session_id: str) -> Any:
    return _runner.session_index(session_id) if _runner is not None else None
