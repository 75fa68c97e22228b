"""Console actions sent to the worker that owns a run, from any web process.

``send(session_id, action)`` writes a ``WorkerCommand`` addressed to the run's owner and
waits for the answer in the row, at most ``ANSWER_WITHIN_S``. It says why not instead when no
worker owns the run (it is not active, or its lease expired) or the owner did not answer in
time; a command nobody took by then is withdrawn, so it never runs late.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from django.utils import timezone

from dashboard.runs.models import RunRecord, WorkerCommand

__all__ = ["ANSWER_WITHIN_S", "Answer", "send"]

ANSWER_WITHIN_S = 1.0
_CHECK_EVERY_S = 0.02


@dataclass(frozen=True)
class Answer:
    """A worker's answer, or why there is none (``ok`` False and ``error`` says why)."""

    ok: bool
    data: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    worker: str = ""


def owner_of(session_id: str) -> str | None:
    """The worker holding a live lease on the session's run, else None."""
    run = RunRecord.objects.filter(session_id=session_id).only("status", "worker", "lease_until")
    found = run.first()
    if found is None or found.status not in RunRecord.ACTIVE or not found.worker:
        return None
    if found.lease_until is None or found.lease_until < timezone.now():
        return None
    return found.worker


def send(session_id: str, action: str, *, within_s: float = ANSWER_WITHIN_S) -> Answer:
    """Ask the owner of ``session_id``'s run to perform ``action``; see the module docstring."""
    if action not in WorkerCommand.ACTIONS:
        raise ValueError(f"unknown worker action {action!r}")
    deadline = time.monotonic() + within_s
    worker = owner_of(session_id)
    if worker is None:
        return Answer(False, error=f"no worker owns {session_id} (it is not running)")
    command = WorkerCommand.objects.create(session_id=session_id, action=action, worker=worker)
    while True:
        command.refresh_from_db(fields=["state", "answer", "error"])
        if command.state == WorkerCommand.DONE:
            return Answer(True, dict(command.answer or {}), worker=worker)
        if command.state == WorkerCommand.FAILED:
            return Answer(False, error=command.error, worker=worker)
        if time.monotonic() >= deadline:
            break
        time.sleep(_CHECK_EVERY_S)
    withdrawn = WorkerCommand.objects.filter(pk=command.pk, state=WorkerCommand.PENDING).update(
        state=WorkerCommand.EXPIRED, answered_at=timezone.now()
    )
    took = "did not take it" if withdrawn else "took it but did not answer"
    return Answer(False, error=f"worker {worker} {took} within {within_s:g} s", worker=worker)
