"""A worker's one-statement poll: it never says "nothing" when the ORM's claim or command
queries would find something, and says "nothing" when there is nothing."""

from __future__ import annotations

import itertools
from datetime import timedelta

import pytest
from django.utils import timezone

from dashboard.runs.idle_poll import anything_waiting
from dashboard.runs.models import RunRecord, WorkerCommand
from dashboard.runs.worker import claim_next

pytestmark = pytest.mark.django_db

_n = itertools.count()


def _run(**fields):
    return RunRecord.objects.create(
        session_id=f"poll-{next(_n)}", task="t", model_name="m", **fields
    )


def _command(worker, state=WorkerCommand.PENDING):
    return WorkerCommand.objects.create(
        session_id="s", action=WorkerCommand.KERNEL_STATUS, worker=worker, state=state
    )


def test_an_empty_console_has_nothing_waiting():
    _run(status=RunRecord.DONE, kind="gateway")
    assert anything_waiting("w1", timezone.now(), True) == (False, False)


def test_a_command_waits_only_for_the_worker_it_names_and_only_while_pending():
    _command("w1")
    _command("w2", WorkerCommand.TAKEN)
    assert anything_waiting("w1", timezone.now(), True)[0] is True
    assert anything_waiting("w2", timezone.now(), True)[0] is False
    assert anything_waiting("w3", timezone.now(), True)[0] is False


def test_a_lapsed_lease_waits_only_when_lapsed_leases_are_claimed():
    now = timezone.now()
    _run(status=RunRecord.RUNNING, worker="x", lease_until=now + timedelta(seconds=30))
    assert anything_waiting("w1", now, True)[1] is False
    _run(status=RunRecord.RUNNING, worker="y", lease_until=now - timedelta(seconds=1))
    assert anything_waiting("w1", now, True)[1] is True
    assert anything_waiting("w1", now, False)[1] is False


@pytest.mark.parametrize(
    "fields",
    [
        {"status": RunRecord.QUEUED},
        {"status": RunRecord.QUEUED, "pinned_to": "another-process"},
        {"status": RunRecord.RUNNING, "worker": "z", "lease_until": timezone.now()},
        {"status": RunRecord.RUNNING, "worker": "z"},
        {"status": RunRecord.FAILED},
    ],
)
@pytest.mark.parametrize("expired", [True, False])
def test_whenever_a_claim_would_succeed_the_poll_said_so(fields, expired):
    _run(**fields)
    later = timezone.now() + timedelta(seconds=1)
    said = anything_waiting("w1", later, expired)[1]
    claimed = claim_next("w1", expired=expired)
    assert claimed is None or said is True
    if fields["status"] == RunRecord.QUEUED and not fields.get("pinned_to"):
        assert said is True and claimed is not None
