"""Workers: the processes (or the embedded thread) that run agent sessions.

A worker claims a queued run with a lease (``claim_next``): ``SELECT … FOR UPDATE SKIP
LOCKED`` on PostgreSQL, and on every backend one conditional update that names the state it
read (status, owner and lease), so of two workers reading the same row exactly one update
matches. While it runs the session it owns the session's kernel and renews the lease every
third of it. A run whose lease has expired (its worker was killed or stalled) is claimable
again: the next worker resumes it from the checkpoint saved at the last turn boundary, and the
agent ``Session`` replays from the Event Log what the interrupted turn had already appended, so
nothing is appended twice. After ``MAX_ATTEMPTS`` claims, or when the run cannot be resumed
here, it is marked failed with the reason instead. A lease that ran out during a database
outage is not taken over until the owner had a lease's time to renew it (``Worker.tick``).

Every write a worker makes to a run is fenced by its ownership (``worker=<me>``): a worker
that lost its lease stops at its next write instead of overwriting the new owner's.

Console actions reach the owner through ``WorkerCommand`` rows (``dashboard.commands``): the
worker's loop picks them up every ``poll_s`` and answers in the row. Kernel state, the
namespace digest and the eviction index are written to the database after each step, so any
web process shows them.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

from django.db import close_old_connections, connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from dashboard.eventlog import get_event_log
from dashboard.outage import database_unavailable
from dashboard.record.store import store_calls
from dashboard.runs.grants import readable_by
from dashboard.runs.idle_poll import anything_waiting
from dashboard.runs.models import CompressEvent, KernelState, RunRecord, SessionIndex, WorkerCommand
from dashboard.runs.notify import push_session
from dashboard.runs.profiles import core_profile
from scroll_core import telemetry, wire
from scroll_core.agent import Session, StepRecord
from scroll_core.agent.interrupted import mark_interrupted
from scroll_core.kernel import KernelConfig, KernelManager
from scroll_core.models import POLICY_NAME, OpenAICompatibleModel, PolicyModel
from scroll_core.profile import Profile
from scroll_core.store import KIND_CONTEXT_MSG
from scroll_core.store.outage_cap import outage_cap
from scroll_core.store.pg_outage import outage_budget_s

__all__ = [
    "LEASE_S",
    "MAX_ATTEMPTS",
    "PROCESS_TOKEN",
    "RunStopped",
    "Worker",
    "claim_next",
    "host_set",
    "make_model",
    "model_endpoint_configured",
    "pin_host_functions",
]

log = logging.getLogger("dashboard.runs.worker")

LEASE_S = 15.0
# A starting worker marks the open turns of runs that ended this recently (their worker may
# have stopped before the log came back to take the mark).
UNMARKED_SWEEP_S = 24 * 3600
POLL_S = 0.2
# A run claimed this many times without finishing is failed rather than resumed again.
MAX_ATTEMPTS = 3
DEFAULT_SLOTS = 4
# Identifies this process; runs whose host functions live in its memory are pinned to it.
PROCESS_TOKEN = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
# The counters a checkpoint saves with the session state, restored on takeover.
COUNTERS = (
    "turns", "steps", "evictions", "folds", "expands", "view_tokens", "trigger_tokens",
    "context_size", "last_report", "last_answer",
)  # fmt: skip

# A database going away for a while (a restart, a failover, killed sessions, read-only, a
# grant revoked; see dashboard.outage.database_unavailable): the run waits for it and
# resumes from its checkpoint rather than failing.
OUTAGE_POLL_S = 0.5

_pinned_lock = threading.Lock()
_pinned: dict[str, dict[str, Callable[..., Any]]] = {}


class RunStopped(Exception):
    """Raised inside a run when staff asked it to stop."""


class NotResumable(Exception):
    """The run cannot go on here; it is failed with this reason."""


class HandedOver(Exception):
    """This worker is shutting down; the run continues in another worker."""


class LeaseLost(Exception):
    """This worker no longer owns the run (another took it over after the lease expired)."""


def pin_host_functions(session_id: str, functions: Mapping[str, Callable[..., Any]]) -> None:
    """Keep host functions for a run started in this process (only this process runs it)."""
    with _pinned_lock:
        _pinned[session_id] = dict(functions)


def _take_pinned(session_id: str) -> dict[str, Callable[..., Any]] | None:
    with _pinned_lock:
        return _pinned.get(session_id)


def host_set(name: str) -> dict[str, Callable[..., Any]]:
    """A named set of host functions any worker process can bind (``demo``: ``ops.*``)."""
    if name == "demo":
        from dashboard.runs.demo_data import host_functions

        return host_functions()
    raise LookupError(f"no host function set named {name!r}")


def model_endpoint_configured(env: Mapping[str, str] | None = None) -> bool:
    env = os.environ if env is None else env
    return bool(env.get("SCROLL_MODEL_NAME", "").strip())


def make_model(name: str | None, profile: Profile, *, task_code: bool = True) -> Any:
    """The policy model for ``None`` or its own name, else the OpenAI-compatible client.
    ``task_code=False`` stops the policy model executing the task's fenced code."""
    if not name or name == POLICY_NAME:
        return PolicyModel(context_size=profile.context_size, task_code=task_code)
    if not model_endpoint_configured():
        raise ValueError(f"model {name!r} needs SCROLL_MODEL_NAME (an endpoint) configured")
    return OpenAICompatibleModel(name, context_size=profile.context_size)


# -- claiming -------------------------------------------------------------------------------
def _claimable(now: Any, pinned_to: str, expired: bool) -> Any:
    claimable = Q(status=RunRecord.QUEUED) & (Q(pinned_to="") | Q(pinned_to=pinned_to))
    if expired:
        claimable |= Q(status=RunRecord.RUNNING, lease_until__lt=now)
    return RunRecord.objects.filter(claimable).order_by("created_at", "id")


def claim_next(
    worker_id: str, *, lease_s: float = LEASE_S, pinned_to: str = "", expired: bool = True
) -> RunRecord | None:
    """Claim the oldest queued run, or (``expired``) one whose lease expired; None when
    there is none.

    The update names the status, owner and lease it read, so it matches for one claimant
    only; on PostgreSQL ``SKIP LOCKED`` also keeps claimants off each other's candidate.
    """
    now = timezone.now()
    if connection.vendor == "postgresql":
        with transaction.atomic():
            found = _claimable(now, pinned_to, expired).select_for_update(skip_locked=True)
            return _cas_claim(list(found[:1]), worker_id, now, lease_s)
    return _cas_claim(list(_claimable(now, pinned_to, expired)[:8]), worker_id, now, lease_s)


def _cas_claim(
    candidates: list[RunRecord], worker_id: str, now: Any, lease_s: float
) -> RunRecord | None:
    for run in candidates:
        same = RunRecord.objects.filter(pk=run.pk, status=run.status, worker=run.worker)
        if run.lease_until is None:
            same = same.filter(lease_until__isnull=True)
        else:
            same = same.filter(lease_until=run.lease_until)
        won = same.update(
            status=RunRecord.RUNNING,
            worker=worker_id,
            lease_until=now + timedelta(seconds=lease_s),
            heartbeat_at=now,
            attempts=F("attempts") + 1,
        )
        if won == 1:
            return RunRecord.objects.get(pk=run.pk)
    return None


# -- one run --------------------------------------------------------------------------------
class _Live:
    """What a worker keeps about one run it executes."""

    def __init__(self, run: RunRecord) -> None:
        self.run = run
        self.session_id = run.session_id
        self.stop = threading.Event()
        self.lost = False
        self.handover = False
        self.session: Session | None = None
        self.last_status = ""
        self.calls = wire.WireLog()  # model calls made since the last step was recorded
        # When the databases stopped answering this run (monotonic), None while they answer:
        # the outage budget counts from here across every retry, not from each retry.
        self.outage_since: float | None = None


class Worker:
    """Claims runs and executes them on ``slots`` threads; see the module docstring."""

    def __init__(
        self,
        *,
        worker_id: str | None = None,
        slots: int = DEFAULT_SLOTS,
        lease_s: float = LEASE_S,
        poll_s: float = POLL_S,
        kernels: KernelManager | None = None,
        kernel_pool: int = 1,
        outage_s: float | None = None,
    ) -> None:
        self.id = worker_id or f"worker:{PROCESS_TOKEN}:{secrets.token_hex(2)}"
        self.slots = slots
        self.lease_s = lease_s
        self.poll_s = poll_s
        self._kernels = kernels
        self._kernel_pool = kernel_pool
        self._lock = threading.Lock()
        self._live: dict[str, _Live] = {}
        self._executor = ThreadPoolExecutor(max_workers=slots, thread_name_prefix="scroll-run")
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_renew = 0.0
        # When this worker's loop last met a database outage (monotonic), None if never: for
        # a lease after it, runs whose lease expired are not taken over (see ``tick``).
        self._away_at: float | None = None
        # Open turns of ended runs still to be marked interrupted in the log (it was away
        # when they ended): session id -> (session checkpoint, reason). Retried every tick.
        self._unmarked: dict[str, tuple[dict[str, Any], str]] = {}
        # How long a run waits for its databases before it is failed (SCROLL_DB_OUTAGE_S).
        self.outage_s = outage_budget_s() if outage_s is None else outage_s

    # -- kernels -------------------------------------------------------------------------
    @property
    def kernels(self) -> KernelManager:
        with self._lock:
            if self._kernels is None:
                self._kernels = KernelManager(KernelConfig.from_env(), pool_size=self._kernel_pool)
            return self._kernels

    # -- the loop ------------------------------------------------------------------------
    def start(self) -> Worker:
        """Run the loop on a daemon thread (the embedded worker of ``make run``)."""
        self._thread = threading.Thread(target=self.run_forever, name="scroll-worker", daemon=True)
        self._thread.start()
        return self

    def run_forever(self) -> None:
        log.info("worker %s started (%d slots, lease %.0f s)", self.id, self.slots, self.lease_s)
        try:
            self._sweep_unmarked()
        except Exception as exc:
            log.warning("worker %s: could not look for unmarked turns: %s", self.id, exc)
        away = False  # a database outage is logged once, when it starts, without a traceback
        while not self._halt.is_set():
            try:
                self.tick()
                if away:
                    log.warning("worker %s: the database answers again", self.id)
                away = False
            except Exception as exc:
                if not database_unavailable(exc):
                    log.exception("worker %s: loop pass failed", self.id)
                else:
                    self._away_at = time.monotonic()
                    self._last_renew = 0.0  # renew at the first pass the database answers
                    if not away:
                        log.warning("worker %s: the database is away: %s", self.id, exc)
                    away = True
                close_old_connections()
            self._halt.wait(self.poll_s)
        connection.close()

    def tick(self) -> None:
        """One pass: answer commands, renew leases, mark the open turns of ended runs,
        claim runs while slots are free.

        A lease that ran out while the console database was away says nothing about its
        worker: no worker could renew then. So for one lease after this worker last met an
        outage it claims queued runs only; an owner still alive has renewed by then (at its
        first pass that reaches the database, and from each run waiting for it), and a run
        whose worker died meanwhile is taken over one lease later than usual."""
        settled = self._away_at is None or time.monotonic() - self._away_at >= self.lease_s
        commands, claimable = anything_waiting(self.id, timezone.now(), settled)
        if commands:
            self._answer_commands()
        self._mark_pending()
        now = timezone.now().timestamp()
        if now - self._last_renew >= self.lease_s / 3:
            self._renew()
            self._last_renew = now
        while claimable and not self._halt.is_set() and self.free_slots() > 0:
            run = claim_next(
                self.id, lease_s=self.lease_s, pinned_to=PROCESS_TOKEN, expired=settled
            )
            if run is None:
                break
            self._launch(run)

    def free_slots(self) -> int:
        with self._lock:
            return self.slots - len(self._live)

    def running(self) -> list[str]:
        with self._lock:
            return sorted(self._live)

    def shutdown_soon(self) -> None:
        """Stop claiming and hand the runs here over after their current step (safe from
        a signal handler)."""
        self._halt.set()
        with self._lock:
            lives = list(self._live.values())
        for live in lives:
            live.handover = True
            live.stop.set()

    def shutdown(self) -> None:
        """Stop claiming, hand the runs here over after their current step (their lease
        ends at once, so another worker resumes them from the checkpoint), close kernels."""
        self.shutdown_soon()
        if self._thread is not None:
            self._thread.join(timeout=30)
        self._executor.shutdown(wait=True, cancel_futures=True)
        if self._kernels is not None:
            self._kernels.shutdown()

    # -- leases --------------------------------------------------------------------------
    def _renew(self) -> None:
        with self._lock:
            lives = list(self._live.values())
        now = timezone.now()
        for live in lives:
            kept = RunRecord.objects.filter(pk=live.run.pk, worker=self.id).update(
                lease_until=now + timedelta(seconds=self.lease_s), heartbeat_at=now
            )
            if kept == 0:
                log.warning("worker %s lost the lease of %s", self.id, live.session_id)
                live.lost = True
                live.stop.set()

    def _save(self, live: _Live, *names: str) -> None:
        """Write fields of the run, only while this worker still owns it."""
        run = live.run
        values = {name: getattr(run, name) for name in names}
        if RunRecord.objects.filter(pk=run.pk, worker=self.id).update(**values) != 1:
            live.lost = True
            raise LeaseLost(run.session_id)

    # -- executing a run -----------------------------------------------------------------
    def _launch(self, run: RunRecord) -> None:
        live = _Live(run)
        with self._lock:
            self._live[run.session_id] = live
        self._executor.submit(self._execute, live)

    def _execute(self, live: _Live) -> None:
        close_old_connections()
        run = live.run
        session: Session | None = None
        try:
            session = self._run_through_outages(live)
            run.status = RunRecord.DONE
        except RunStopped:
            run.status = RunRecord.STOPPED
        except (LeaseLost, HandedOver):
            pass
        except NotResumable as exc:
            run.status, run.error = RunRecord.FAILED, str(exc)
        except Exception as exc:
            log.exception("worker: run %s failed", live.session_id)
            run.status = RunRecord.FAILED
            run.error = f"{type(exc).__name__}: {exc}\n" + traceback.format_exc(limit=8)[-4000:]
        finally:
            try:
                self._finish(live, session)
            except Exception:
                log.exception("worker: finishing run %s failed", live.session_id)
            connection.close()

    def _run_through_outages(self, live: _Live) -> Session:
        """Prepare and drive the run; when a database goes away under it, wait for both to
        answer and resume from the checkpoint (what the interrupted turn appended is replayed
        from the log, not appended again). NotResumable once an outage lasts past
        ``outage_s``."""
        while True:
            session: Session | None = None
            try:
                session = self._prepare(live)
                self._drive(live, session)
                return session
            except Exception as exc:
                if not database_unavailable(exc):
                    raise
                if live.outage_since is None:
                    live.outage_since = time.monotonic()
                log.warning("worker: run %s waits for the database: %s", live.session_id, exc)
                if session is not None:
                    session.close()
                if self._kernels is not None:
                    self._kernels.release(live.session_id)
                live.session = None
                self._wait_for_databases(live, exc)

    def _wait_for_databases(self, live: _Live, cause: Exception) -> None:
        """Return once the console database takes a write (the run's heartbeat and lease,
        fenced by ownership: a read-only database answers reads) and the Event Log answers,
        with the run's checkpoint re-read; NotResumable once the outage has lasted
        ``outage_s``."""
        deadline = (live.outage_since or time.monotonic()) + self.outage_s
        while True:
            _check_stop(live)
            try:
                close_old_connections()
                now = timezone.now()
                owned = RunRecord.objects.filter(pk=live.run.pk, worker=self.id).update(
                    heartbeat_at=now, lease_until=now + timedelta(seconds=self.lease_s)
                )
                if owned != 1:
                    live.lost = True
                    raise LeaseLost(live.session_id)
                live.run.refresh_from_db(fields=["checkpoint", "worker", "attempts"])
                get_event_log().last_seq()
            except LeaseLost:
                raise
            except Exception as exc:
                if not database_unavailable(exc):
                    raise
                cause = exc
            else:
                return
            if time.monotonic() >= deadline:
                raise NotResumable(
                    f"a database did not answer for {self.outage_s:g} s "
                    f"({type(cause).__name__}: {cause})"
                )
            live.stop.wait(OUTAGE_POLL_S)

    def _prepare(self, live: _Live) -> Session:
        """The session to drive: new, or resumed from the checkpoint. NotResumable when
        the run was claimed too often or its host functions died with another process."""
        run = live.run
        if run.attempts > MAX_ATTEMPTS:
            raise NotResumable(
                f"the run's lease expired {run.attempts - 1} times (its worker was stopped "
                "or stalled each time); not resuming it again"
            )
        if run.pinned_to and run.pinned_to != PROCESS_TOKEN:
            raise NotResumable(
                f"the process that started this run ({run.pinned_to}) held its host functions "
                "and stopped; no other worker can run it"
            )
        if run.started_at is None:
            run.started_at = timezone.now()
            self._save(live, "started_at")
        push_session(run)
        profile_id = run.profile_id
        profile = core_profile(profile_id)
        model = make_model(run.model_name, profile, task_code=run.task_code)
        options = run.options or {}
        common: dict[str, Any] = {
            "kernels": self.kernels,
            "max_steps": int(options.get("max_steps", 8)),
            "on_step": lambda record: self._on_step(live, record),
            # Re-read before every compress: an admin change applies at the next one.
            "profile_source": lambda: core_profile(profile_id),
            # Off by default; an operator's live grants, asked at every ms call.
            "readable_agents": readable_by,
        }
        saved = run.checkpoint or {}
        if saved.get("session"):
            # The previous owner's kernel went with it; this worker starts a new one.
            _kernel_gone(live.session_id, self.id, "")
            self._roll_back_to(live, saved)
            session = Session.resume(saved["session"], get_event_log(), model, profile=profile,
                                     **common)  # fmt: skip
            telemetry_note = {"resumed_at_turn": saved.get("next_turn", 0), "by": self.id}
            with telemetry.span("scroll.run.resume", session=live.session_id, **telemetry_note):
                pass
        else:
            if not run.task_code:
                _note_task_code_off(run)
            session = Session(get_event_log(), model, session_id=live.session_id,
                              agent_id=run.agent_id, profile=profile, **common)  # fmt: skip
            self._checkpoint(live, session, next_turn=0)
        live.session = session
        return session

    def _roll_back_to(self, live: _Live, saved: Mapping[str, Any]) -> None:
        """Undo what the console recorded after the checkpoint: those steps are replayed."""
        run = live.run
        for name, value in (saved.get("counters") or {}).items():
            if name in COUNTERS:
                setattr(run, name, value)
        with transaction.atomic():
            turn = int(saved["session"].get("turn", 0))
            CompressEvent.objects.filter(run=run, turn__gt=turn).delete()
            self._save(live, *COUNTERS)

    def _drive(self, live: _Live, session: Session) -> None:
        run = live.run
        turns = list(run.plan or ())
        options = run.options or {}
        pause_s = float(options.get("pause_s", 0.0))
        functions = self._host_functions(run)
        with telemetry.session_scope(live.session_id), wire.collecting(live.calls):
            if functions:
                kernel = session.kernel
                assert kernel is not None
                kernel.register(functions)
            # The Kernels page shows the kernel from the start, not only after its first cell.
            self._record_kernel(live)
            first = int((run.checkpoint or {}).get("next_turn", 0))
            for i in range(first, len(turns)):
                _check_stop(live)
                if i > first and pause_s:
                    live.stop.wait(pause_s)
                    _check_stop(live)
                result = session.ask(turns[i])
                run.turns += 1
                run.last_answer = (result.answer or result.error or "")[:4000]
                self._checkpoint(live, session, next_turn=i + 1)
                if result.stop_reason in ("context_unfit", "model_error", "context_overflow"):
                    raise RuntimeError(f"{result.stop_reason}: {result.error}")

    def _host_functions(self, run: RunRecord) -> dict[str, Callable[..., Any]]:
        if run.pinned_to:
            return _take_pinned(run.session_id) or {}
        name = (run.options or {}).get("host_set")
        return host_set(name) if name else {}

    def _checkpoint(self, live: _Live, session: Session, *, next_turn: int) -> None:
        """Save the session at a turn boundary with the counters it goes with, in one write."""
        run = live.run
        run.checkpoint = {
            "session": session.checkpoint(),
            "next_turn": next_turn,
            "counters": {name: getattr(run, name) for name in COUNTERS},
        }
        self._save(live, "checkpoint", *COUNTERS)
        live.outage_since = None
        push_session(run)

    def _on_step(self, live: _Live, record: StepRecord) -> None:
        run = live.run
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
        for tool in record.tools:
            live.last_status = tool.status
            run.expands += sum(1 for call in tool.ms_calls if call.name == "expand")
        run.steps += 1
        with transaction.atomic():
            self._save(live, *COUNTERS)
            CompressEvent.objects.bulk_create(rows)
            store_calls(live.calls.drain())
            if rows and index is not None:
                _save_index(live.session_id, index)
        live.outage_since = None
        if record.tools:
            self._record_kernel(live)
        push_session(run)
        _check_stop(live)

    def _finish(self, live: _Live, session: Session | None) -> None:
        run = live.run
        with self._lock:
            self._live.pop(live.session_id, None)
        with _pinned_lock:
            _pinned.pop(live.session_id, None)
        if session is not None:
            session.close()
            # The model's HTTP connections are the worker's (it made the model): closed
            # now, not whenever the collector gets to them.
            close_model = getattr(session.model, "close", None)
            if callable(close_model):
                close_model()
        if self._kernels is not None:
            self._kernels.release(live.session_id)
        if len(live.calls) and not live.lost:  # a failed call ends the run before its step
            try:
                store_calls(live.calls.drain())
            except Exception:
                log.exception("worker: recording the last calls of %s failed", live.session_id)
        if live.lost:
            log.warning("worker %s: %s continues elsewhere", self.id, live.session_id)
            return
        if live.handover and run.status == RunRecord.RUNNING:
            # Not a failure: give the lease back now, and this claim does not count.
            RunRecord.objects.filter(pk=run.pk, worker=self.id).update(
                lease_until=timezone.now(), attempts=F("attempts") - 1
            )
            _kernel_gone(live.session_id, self.id, live.last_status)
            return
        if run.status in (RunRecord.FAILED, RunRecord.STOPPED):
            self._close_open_turn(live)
        run.ended_at = timezone.now()
        run.lease_until = None

        def record_the_end() -> None:
            _kernel_gone(live.session_id, self.id, live.last_status)
            self._save(live, "status", "error", "ended_at", "lease_until", *COUNTERS)

        try:
            # The run's end is the one write that must not be lost to an outage: without it
            # the run would be claimed again when its lease expires.
            _through_outage(record_the_end, self.outage_s, live.session_id)
        except LeaseLost:
            return
        push_session(run)

    # -- no half turns -------------------------------------------------------------------
    def _close_open_turn(self, live: _Live) -> None:
        """Mark the turn a failed or stopped run left open as interrupted in the log (see
        ``scroll_core.agent.interrupted``); if the log is away, on a later tick."""
        saved = (live.run.checkpoint or {}).get("session")
        if not saved:
            return
        with self._lock:
            self._unmarked[live.session_id] = (saved, _interrupted_why(live.run))
        self._mark_pending(only=live.session_id)

    def _sweep_unmarked(self) -> None:
        """Queue the runs that failed or were stopped in the last ``UNMARKED_SWEEP_S`` for
        marking: marking is idempotent, and a turn already closed is left alone."""
        since = timezone.now() - timedelta(seconds=UNMARKED_SWEEP_S)
        ended = RunRecord.objects.filter(
            status__in=(RunRecord.FAILED, RunRecord.STOPPED), ended_at__gte=since
        ).only("session_id", "status", "error", "checkpoint")
        for run in ended:
            saved = (run.checkpoint or {}).get("session")
            if saved:
                with self._lock:
                    self._unmarked.setdefault(run.session_id, (saved, _interrupted_why(run)))

    def _mark_pending(self, only: str | None = None) -> None:
        with self._lock:
            pending = [(k, v) for k, v in self._unmarked.items() if only in (None, k)]
        for session_id, (saved, reason) in pending:
            try:
                # One try each time, no waiting: this runs on the loop's thread.
                with outage_cap(0):
                    seqs = mark_interrupted(get_event_log(), saved, reason)
            except Exception as exc:
                if database_unavailable(exc):
                    continue  # still away: the next tick tries again
                log.exception("worker: marking the open turn of %s failed", session_id)
            else:
                if seqs:
                    log.warning("worker: %s: open turn marked interrupted (seqs %s)",
                                session_id, seqs)  # fmt: skip
            with self._lock:
                self._unmarked.pop(session_id, None)

    # -- kernels and commands ------------------------------------------------------------
    def _kernel_row(self, live: _Live | None, session_id: str) -> dict[str, Any] | None:
        if self._kernels is None:
            return None
        status = self._kernels.status()["sessions"].get(session_id)
        if status is None:
            return None
        session = live.session if live is not None else None
        digest = getattr(session, "digest", None)
        return {
            "worker": self.id,
            "tier": status.tier,
            "strength": status.strength,
            "layers": ", ".join(status.layers),
            "missing_layers": list(status.missing_layers),
            "alive": status.alive,
            "pid": status.pid,
            "memory_bytes": _rss_bytes(status.pid) if status.alive else None,
            "started_at": status.started_at or None,
            "cells": status.cells,
            "restarts": status.restarts,
            "last_status": (live.last_status if live else "") or "idle",
            "digest": digest.render() if digest is not None else "",
            "running": live is not None,
            "updated_at": timezone.now(),
        }

    def _record_kernel(self, live: _Live) -> dict[str, Any] | None:
        row = self._kernel_row(live, live.session_id)
        if row is not None:
            KernelState.objects.update_or_create(session_id=live.session_id, defaults=row)
        return row

    def _answer_commands(self) -> None:
        pending = list(WorkerCommand.objects.filter(worker=self.id, state=WorkerCommand.PENDING))
        for command in pending:
            taken = WorkerCommand.objects.filter(pk=command.pk, state=WorkerCommand.PENDING).update(
                state=WorkerCommand.TAKEN
            )
            if taken != 1:
                continue  # the sender gave up on it
            state, answer, error = WorkerCommand.DONE, {}, ""
            try:
                answer = self._perform(command)
            except LookupError as exc:
                state, error = WorkerCommand.FAILED, str(exc)
            except Exception as exc:
                log.exception("worker %s: command %s failed", self.id, command)
                state, error = WorkerCommand.FAILED, f"{type(exc).__name__}: {exc}"
            WorkerCommand.objects.filter(pk=command.pk).update(
                state=state, answer=answer, error=error, answered_at=timezone.now()
            )

    def _perform(self, command: WorkerCommand) -> dict[str, Any]:
        session_id = command.session_id
        with self._lock:
            live = self._live.get(session_id)
        if live is None:
            raise LookupError(f"worker {self.id} is not running {session_id!r}")
        action = command.action
        if action == WorkerCommand.STOP:
            live.stop.set()
            return {"stopping": True}
        if action == WorkerCommand.DIGEST:
            digest = getattr(live.session, "digest", None)
            return {"digest": digest.render() if digest is not None else ""}
        if action == WorkerCommand.KERNEL_STATUS:
            row = self._record_kernel(live)
            if row is None:
                raise LookupError(f"no kernel for session {session_id!r}")
            return _jsonable_row(row)
        if action == WorkerCommand.RESTART_KERNEL:
            if self._kernel_row(live, session_id) is None:
                raise LookupError(f"no kernel for session {session_id!r}")
            # The kernel's own scroll.kernel.restart span (marked requested) is the one; a
            # second around it counted every console restart twice.
            with telemetry.session_scope(session_id):
                self.kernels.get(session_id).restart()
            row = self._record_kernel(live)
            return _jsonable_row(row or {})
        if action == WorkerCommand.STOP_KERNEL:
            if self._kernel_row(live, session_id) is None:
                raise LookupError(f"no kernel for session {session_id!r}")
            live.stop.set()
            self.kernels.release(session_id)
            _kernel_gone(session_id, self.id, live.last_status)
            return {"stopped": True}
        raise LookupError(f"unknown action {action!r}")


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


def _interrupted_why(run: RunRecord) -> str:
    if run.status == RunRecord.STOPPED:
        return "the run was stopped"
    return "the run failed: " + (run.error.splitlines() or ["?"])[0][:300]


def _through_outage(work: Callable[[], None], budget_s: float, session_id: str) -> None:
    """``work()``, again every ``OUTAGE_POLL_S`` while a database is away, for at most
    ``budget_s``."""
    deadline = time.monotonic() + budget_s
    while True:
        close_old_connections()
        try:
            work()
            return
        except Exception as exc:
            if not database_unavailable(exc) or time.monotonic() >= deadline:
                raise
            log.warning("worker: recording the end of %s waits for the database: %s",
                        session_id, exc)  # fmt: skip
        time.sleep(OUTAGE_POLL_S)


def _check_stop(live: _Live) -> None:
    if not live.stop.is_set():
        return
    if live.lost:
        raise LeaseLost(live.session_id)
    if live.handover:
        raise HandedOver(live.session_id)
    raise RunStopped()


def _save_index(session_id: str, index: Any) -> None:
    SessionIndex.objects.update_or_create(
        session_id=session_id,
        defaults={
            "data": index.to_checkpoint(),
            "blocks": len(index),
            "updated_at": timezone.now(),
        },
    )


def _kernel_gone(session_id: str, worker_id: str, last_status: str) -> None:
    KernelState.objects.filter(session_id=session_id).update(
        alive=False, running=False, pid=None, memory_bytes=None, worker=worker_id,
        last_status=last_status, updated_at=timezone.now(),
    )  # fmt: skip


def _jsonable_row(row: Mapping[str, Any]) -> dict[str, Any]:
    return {k: (v.isoformat() if hasattr(v, "isoformat") else v) for k, v in row.items()}


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
