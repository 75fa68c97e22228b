"""The console's record of gateway requests (dashboard.gateway.recorder): batched off the
request path, merged per session, nothing lost."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dashboard.gateway.models import GatewayKey
from dashboard.gateway.recorder import IndexSnapshot, Job, Recorder
from dashboard.runs.models import RunRecord
from scroll_core.gateway import ClientReply, GatewayStats
from scroll_core.index import EvictionIndex
from scroll_core.models import Usage

pytestmark = pytest.mark.django_db(transaction=True)


def _job(key: GatewayKey, session: str, turn: int, answer: str | None) -> Job:
    reply = None
    if answer is not None:
        stats = GatewayStats(session_id=session, upstream_calls=2, recalls=1, evictions=turn % 2)
        reply = ClientReply(answer, (), "stop", "gpt-test", Usage(100, 10), stats)
    return Job(
        key.pk, key.agent_id, None, session, "upstream-model", "openai", "gpt-test", turn,
        reply, "" if answer is not None else "ModelError: boom", None,
        IndexSnapshot(EvictionIndex()),
    )  # fmt: skip


@pytest.fixture
def recorder():
    # A linger far longer than the test: only flush() can make it write.
    rec = Recorder(linger_s=600)
    yield rec
    rec.close()


def test_a_burst_of_requests_is_recorded_merged_per_session_and_nothing_is_lost(recorder):
    key, _ = GatewayKey.issue(agent_id="alice", upstream_base_url="http://127.0.0.1:9/v1")
    recorder.submit(_job(key, "gw:alice:a", 1, "first"))
    assert recorder.flush(30)  # the first batch
    for turn, answer in ((2, "second"), (3, "third")):
        recorder.submit(_job(key, "gw:alice:a", turn, answer))
    recorder.submit(_job(key, "gw:alice:b", 1, "other session"))
    assert recorder.flush(30)  # cuts the linger short: one batch, two sessions
    a = RunRecord.objects.get(session_id="gw:alice:a")
    assert (a.kind, a.turns, a.steps, a.expands, a.evictions) == ("gateway", 3, 6, 3, 2)
    assert a.last_answer == "third" and a.status == RunRecord.DONE
    assert RunRecord.objects.get(session_id="gw:alice:b").turns == 1
    key.refresh_from_db()
    assert (key.requests, key.tokens_used) == (4, 440)


def test_a_failed_request_marks_the_session_failed_with_its_error(recorder):
    key, _ = GatewayKey.issue(agent_id="bob", upstream_base_url="http://127.0.0.1:9/v1")
    recorder.submit(_job(key, "gw:bob:x", 1, "fine"))
    recorder.submit(_job(key, "gw:bob:x", 2, None))
    assert recorder.flush(30)
    run = RunRecord.objects.get(session_id="gw:bob:x")
    assert run.status == RunRecord.FAILED and "boom" in run.error and run.turns == 1
    key.refresh_from_db()
    assert key.requests == 1  # a failed request spent nothing


def test_a_gateway_session_names_its_agent_and_runs_no_task_code(
    recorder, client, django_user_model
):
    # Issue 29: the Runs page showed an empty agent column and the session page
    # "task code: runs" for gateway sessions.
    key, _ = GatewayKey.issue(agent_id="carol", upstream_base_url="http://127.0.0.1:9/v1")
    recorder.submit(_job(key, "gw:carol:c", 1, "hello"))
    assert recorder.flush(30)
    run = RunRecord.objects.get(session_id="gw:carol:c")
    assert (run.agent_id, run.task_code) == ("carol", False)

    client.force_login(django_user_model.objects.create_user("op", password="pw-op-123456"))
    runs = client.get("/runs/").content.decode()
    assert "<td>carol</td>" in runs
    page = client.get("/sessions/gw:carol:c/").content.decode()
    assert "none: a gateway session" in page


def test_gateway_sessions_recorded_before_get_their_agent_from_the_migration():
    import importlib

    from django.apps import apps as django_apps
    from django.db import connection

    migration = importlib.import_module(
        "dashboard.runs.migrations.0002_gateway_runs_name_their_agent"
    )
    RunRecord.objects.create(
        session_id="gw:dave:d", kind="gateway", task="gateway: agent dave through openai (m)"
    )
    RunRecord.objects.create(session_id="task:x", kind="task", task="do it", agent_id="")
    with connection.schema_editor() as editor:
        migration.name_agents(django_apps, editor)
    old = RunRecord.objects.get(session_id="gw:dave:d")
    assert (old.agent_id, old.task_code) == ("dave", False)
    task = RunRecord.objects.get(session_id="task:x")
    assert (task.agent_id, task.task_code) == ("", True)  # other runs untouched


def test_a_session_whose_record_fails_at_commit_costs_only_its_own(recorder):
    # The batch is one transaction; a foreign key checked only at commit (a profile deleted
    # since the request) fails it whole, and the sessions are then written one by one.
    key, _ = GatewayKey.issue(agent_id="dan", upstream_base_url="http://127.0.0.1:9/v1")
    recorder.submit(_job(key, "gw:dan:good", 1, "kept"))
    recorder.submit(replace(_job(key, "gw:dan:bad", 1, "lost"), profile_id=987654))
    recorder.submit(_job(key, "gw:dan:also", 1, "kept too"))
    assert recorder.flush(30)
    assert set(RunRecord.objects.values_list("session_id", flat=True)) == {
        "gw:dan:good",
        "gw:dan:also",
    }
    key.refresh_from_db()
    assert (key.requests, key.tokens_used) == (2, 220)  # the lost one charged nothing
