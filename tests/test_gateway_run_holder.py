"""Which console run holds a session, as the gateway asks before it takes one: the same
answers as the ORM's query over every state a run can be in."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from dashboard.gateway.recorder import GATEWAY_KIND
from dashboard.gateway.service import _run_worker_of
from dashboard.runs.models import RunRecord

pytestmark = pytest.mark.django_db


def _run(session, **fields):
    return RunRecord.objects.create(session_id=session, task="t", model_name="m", **fields)


def test_no_run_and_a_gateway_session_hold_nothing():
    _run("gw", kind=GATEWAY_KIND, status=RunRecord.RUNNING, worker="w1",
         lease_until=timezone.now() + timedelta(minutes=5))  # fmt: skip
    assert _run_worker_of("nobody") == ""
    assert _run_worker_of("gw") == ""


def test_a_queued_run_holds_its_session_named_or_not():
    _run("q1", status=RunRecord.QUEUED, worker="w2")
    _run("q2", status=RunRecord.QUEUED)
    assert _run_worker_of("q1") == "w2"
    assert _run_worker_of("q2") == "(queued)"


def test_a_running_run_holds_its_session_only_while_its_lease_lasts():
    now = timezone.now()
    _run("live", status=RunRecord.RUNNING, worker="w3", lease_until=now + timedelta(seconds=30))
    _run("lapsed", status=RunRecord.RUNNING, worker="w4", lease_until=now - timedelta(seconds=1))
    _run("unleased", status=RunRecord.RUNNING, worker="w5")
    assert _run_worker_of("live") == "w3"
    assert _run_worker_of("lapsed") == ""
    assert _run_worker_of("unleased") == ""


@pytest.mark.parametrize("status", [RunRecord.DONE, RunRecord.FAILED, RunRecord.STOPPED])
def test_a_finished_run_holds_nothing(status):
    _run("over", status=status, worker="w6", lease_until=timezone.now() + timedelta(minutes=1))
    assert _run_worker_of("over") == ""
