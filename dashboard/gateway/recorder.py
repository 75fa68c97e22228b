"""The console's record of gateway requests, written off the request path and in batches.

After every request the service hands a ``Job`` (what the console shows about it) to the
``Recorder``. One thread takes every job queued so far, merges those of one session and
writes them all in one transaction: the sessions' ``RunRecord`` rows (kind ``gateway``), their
``CompressEvent`` rows and upstream calls, the keys' counters, in a handful of statements
however many sessions the batch holds, then one push to the console for them all; and,
hourly, it deletes the expired stored Responses API replies. It lingers ``linger_s`` after
the first job of a batch before taking it, so a busy session costs
the console one write and one push per ``linger_s``, not one per request, and the thread does
not compete for the interpreter with the request it was woken by. ``flush()`` cuts the
linger short and waits until everything submitted before it is written.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import close_old_connections, connections, transaction
from django.db.models import F
from django.utils import timezone

from dashboard.bulk_insert import insert_rows
from dashboard.gateway import stored_responses
from dashboard.gateway.models import GatewayKey
from dashboard.record.store import store_calls
from dashboard.runs.models import CompressEvent, RunRecord
from dashboard.runs.notify import push_sessions
from scroll_core.gateway import ClientReply
from scroll_core.wire import WireCall

__all__ = ["GATEWAY_KIND", "LINGER_S", "IndexSnapshot", "Job", "Recorder"]

GATEWAY_KIND = "gateway"
# How long the recorder waits between batches: the console shows a gateway session at most
# this much later than the client got its answer.
LINGER_S = 0.25
# How often the recorder deletes the stored Responses API replies past their days (at its
# first batch, then at most this often): off the request path, and only in a process that
# serves requests, whose database the batch has just written to.
PRUNE_EVERY_S = 3600.0

log = logging.getLogger("dashboard.gateway")


@dataclass
class Job:
    """What the console records about one finished request (read in the request's thread)."""

    key_id: int
    agent_id: str
    profile_id: int | None
    session_id: str
    model: str
    api: str
    client_model: str
    turn: int
    reply: ClientReply | None
    error: str
    report: dict[str, Any] | None
    index: Any
    calls: list[WireCall] = field(default_factory=list)  # the upstream calls, as sent


class IndexSnapshot:
    """The index's size and tier profile when the request finished (the live index moves on)."""

    def __init__(self, index: Any) -> None:
        self._size = len(index)
        self._tiers = index.tier_profile()

    def __len__(self) -> int:
        return self._size

    def tier_profile(self) -> list[int]:
        return list(self._tiers)


class Recorder:
    """See the module docstring."""

    def __init__(self, *, linger_s: float = LINGER_S) -> None:
        self.linger_s = linger_s
        self._cond = threading.Condition()
        self._jobs: list[Job] = []
        self._submitted = 0
        self._written = 0
        self._closing = False
        self._wake = threading.Event()
        self._prune_due = 0.0  # when the next batch forgets expired stored responses
        self._thread = threading.Thread(target=self._work, name="gateway-record", daemon=True)
        self._thread.start()

    def submit(self, job: Job) -> None:
        with self._cond:
            self._jobs.append(job)
            self._submitted += 1
            self._cond.notify_all()

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until every job submitted so far is written; False on timeout."""
        with self._cond:
            target = self._submitted
            self._wake.set()
            return self._cond.wait_for(lambda: self._written >= target, timeout)

    def close(self, timeout: float = 30.0) -> None:
        with self._cond:
            self._closing = True
            self._wake.set()
            self._cond.notify_all()
        self._thread.join(timeout)

    def _work(self) -> None:
        try:
            while True:
                with self._cond:
                    self._cond.wait_for(lambda: self._jobs or self._closing)
                    closing = self._closing
                if not closing:
                    # Linger first: the write lands between requests, not right after the
                    # one that woke this thread, and takes the jobs that follow with it.
                    self._wake.wait(self.linger_s)
                    self._wake.clear()
                with self._cond:
                    jobs, self._jobs = self._jobs, []
                    if not jobs and self._closing:
                        return
                self._write(jobs)
                with self._cond:
                    self._written += len(jobs)
                    self._cond.notify_all()
        finally:
            # This thread's connection would otherwise be left for the garbage collector
            # (psycopg warns from its __del__ at interpreter exit).
            connections.close_all()

    def _write(self, jobs: Sequence[Job]) -> None:
        """The batch's sessions in one transaction (see ``_record_all``), the keys' counters
        once per key, then one push for them all:
        many new conversations in a batch cost one commit and one hop to the loop, not one
        per session."""
        close_old_connections()
        sessions: dict[str, list[Job]] = {}
        for job in jobs:
            sessions.setdefault(job.session_id, []).append(job)
        try:
            try:
                runs = _record_all(list(sessions.values()))
            except Exception:
                # What only the commit checks (a deferred foreign key: a profile deleted
                # meanwhile) fails the whole batch: each session again on its own, so one
                # bad session costs only its own record.
                log.warning("gateway: a batch of %d sessions failed; one by one", len(sessions))
                runs = []
                for session_jobs in sessions.values():
                    try:
                        runs += _record_all([session_jobs])
                    except Exception:  # the bookkeeping must never break the gateway
                        log.exception(
                            "gateway: recording session %s failed", session_jobs[0].session_id
                        )
            push_sessions(runs)
            self._prune()
        finally:
            # Not held across the linger: a batch is a few statements, and a connection
            # left open in an idle thread is one the database server keeps for nothing.
            close_old_connections()

    def _prune(self) -> None:
        if time.monotonic() < self._prune_due:
            return
        self._prune_due = time.monotonic() + PRUNE_EVERY_S
        try:
            stored_responses.prune()
        except Exception:  # as the bookkeeping above: never the gateway's failure
            log.exception("gateway: forgetting expired stored responses failed")


def _record_all(batch: list[list[Job]]) -> list[RunRecord]:
    """Every session's jobs in one transaction and the keys charged once; the runs written.
    The batch goes in a handful of statements however many sessions it holds
    (``_record_batch``); should that fail, each session again in a savepoint of its own
    (``_record``), so one that fails there is logged and left out."""
    runs: list[RunRecord] = []
    spent: dict[int, tuple[int, int]] = {}
    with transaction.atomic():
        try:
            with transaction.atomic():
                runs = _record_batch(batch, spent)
        except Exception:
            log.warning("gateway: a batch of %d sessions failed as one; one by one", len(batch))
            runs, spent = [], {}
            for session_jobs in batch:
                try:
                    with transaction.atomic():
                        run = _record(session_jobs, spent)
                except Exception:  # the bookkeeping must never break the gateway
                    log.exception(
                        "gateway: recording session %s failed", session_jobs[0].session_id
                    )
                    continue
                runs.append(run)
        _charge(spent)
    return runs


def _charge(spent: dict[int, tuple[int, int]]) -> None:
    """Add each key's tokens and requests to its counters."""
    for key_id, (tokens, requests) in spent.items():
        GatewayKey.objects.filter(pk=key_id).update(
            tokens_used=F("tokens_used") + tokens,
            requests=F("requests") + requests,
            last_used_at=timezone.now(),
        )


def _new_run(first: Job) -> RunRecord:
    return RunRecord(session_id=first.session_id, **_run_defaults(first))


def _run_defaults(first: Job) -> dict[str, Any]:
    return {
        "task": f"gateway: agent {first.agent_id} through {first.api} ({first.client_model})",
        "kind": GATEWAY_KIND,
        "agent_id": first.agent_id,
        # The client runs its own tools; Scroll runs no code of the task's.
        "task_code": False,
        "profile_id": first.profile_id,
        "model_name": first.model,
        "started_at": timezone.now(),
    }


def _record_batch(batch: list[list[Job]], spent: dict[int, tuple[int, int]]) -> list[RunRecord]:
    """Write every session's finished requests in the caller's transaction: the existing
    runs read in one query, the new ones inserted whole in one, each existing one updated,
    the compress rows and the upstream calls inserted in one go each."""
    ids = [jobs[0].session_id for jobs in batch]
    found = RunRecord.objects.in_bulk(ids, field_name="session_id")
    runs: list[RunRecord] = []
    fresh: list[RunRecord] = []
    rows: list[CompressEvent] = []
    for jobs in batch:
        run = found.get(jobs[0].session_id)
        if run is None:
            run = _new_run(jobs[0])
            fresh.append(run)
        rows += _apply(run, jobs, spent)
        runs.append(run)
    # The new runs get their ids here; their compress rows take them from the run they name.
    insert_rows(fresh)
    new = {id(run) for run in fresh}
    for run in runs:
        if id(run) not in new:
            run.save()
    insert_rows(rows)
    store_calls(call for jobs in batch for job in jobs for call in job.calls)
    return runs


def _record(jobs: Sequence[Job], spent: dict[int, tuple[int, int]]) -> RunRecord:
    """Write one session's finished requests (oldest first), in the caller's transaction,
    adding the tokens and requests each key spent on them to ``spent``."""
    first = jobs[0]
    # get_or_create: another web process may have recorded the session meanwhile.
    run, _ = RunRecord.objects.get_or_create(
        session_id=first.session_id, defaults=_run_defaults(first)
    )
    insert_rows(_apply(run, jobs, spent))
    store_calls(call for job in jobs for call in job.calls)
    run.save()
    return run


def _apply(
    run: RunRecord, jobs: Sequence[Job], spent: dict[int, tuple[int, int]]
) -> list[CompressEvent]:
    """``jobs`` (one session's, oldest first) applied to ``run``, and their compress rows;
    each key's tokens and requests added to ``spent``."""
    rows: list[CompressEvent] = []
    for job in jobs:
        run.model_name = job.model
        run.error = job.error
        reply = job.reply
        if reply is not None:
            mine = [
                CompressEvent.from_step(
                    run, run.session_id, job.turn, step, _Step(reason, record), job.index
                )
                for step, (reason, record) in enumerate(reply.compressions)
            ]
            rows += mine
            run.turns += 1
            run.steps += reply.stats.upstream_calls
            run.evictions += reply.stats.evictions
            run.folds += sum(row.folds for row in mine)
            run.expands += reply.stats.recalls
            run.last_answer = reply.content[:4000]
            tokens, requests = spent.get(job.key_id, (0, 0))
            used = reply.usage.input_tokens + reply.usage.output_tokens
            spent[job.key_id] = (tokens + used, requests + 1)
        if job.report is not None:
            run.view_tokens = job.report["total"]
            run.trigger_tokens = job.report["trigger_tokens"]
            run.context_size = job.report["context_size"]
            run.last_report = job.report
        run.status = RunRecord.DONE if reply is not None else RunRecord.FAILED
    run.ended_at = timezone.now()
    return rows


@dataclass
class _Step:
    """What ``CompressEvent.from_step`` reads of an agent-loop compress step."""

    reason: str
    record: Any
