"""Looking writes nothing (issue 29): every console page of a finished session, its call
inspector (recorded and, for a session without a record, rebuilt by replay), its cost and
the replay lab, rendered once each, leave the span store, the Event Log, the call record
and the console's rows exactly as they were."""

from __future__ import annotations

import time

import pytest

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def finished_demo(live_runner):
    from dashboard.runs import demo
    from dashboard.runs.models import RunRecord

    _, sink = live_runner
    run = demo.start_demo(pause_s=0.0)
    deadline = time.monotonic() + 240
    while run.status in RunRecord.ACTIVE and time.monotonic() < deadline:
        time.sleep(0.3)
        run.refresh_from_db()
    assert run.status == RunRecord.DONE, (run.status, run.error)
    assert run.evictions >= 1
    sink.flush(5.0)
    return run, sink


def _counts(session_id: str) -> dict[str, int]:
    from dashboard.eventlog import get_event_log
    from dashboard.record.models import WireBlob, WireCall
    from dashboard.runs.models import CompressEvent, KernelAction, RunRecord
    from dashboard.telemetry.models import Alert, SpanRecord

    log = get_event_log()
    return {
        "spans": SpanRecord.objects.count(),
        "session spans": SpanRecord.objects.filter(session_id=session_id).count(),
        "events": log.last_seq(),
        "calls": WireCall.objects.count(),
        "blobs": WireBlob.objects.count(),
        "compresses": CompressEvent.objects.count(),
        "alerts": Alert.objects.count(),
        "kernel actions": KernelAction.objects.count(),
        "runs": RunRecord.objects.count(),
    }


def _read_everything(client, session_id: str, calls: int) -> None:
    from dashboard.telemetry.models import SpanRecord

    urls = [
        "/",
        f"/sessions/{session_id}/",
        f"/sessions/{session_id}/?after=3",
        f"/sessions/{session_id}/calls/",
        "/traces/",
        "/alerts/",
        "/kernels/",
        "/runs/",
        f"/replay/?session={session_id}",
        f"/replay/?session={session_id}&trigger_ratio=0.5&policy=scroll",
        "/events/1/",
    ]
    urls += [f"/sessions/{session_id}/calls/{n}/" for n in range(calls)]
    spans = SpanRecord.objects.filter(session_id=session_id).order_by("id")
    for span in spans[:3]:
        urls += [f"/traces/{span.trace_id}/", f"/traces/spans/{span.span_id}/"]
    for url in urls:
        response = client.get(url)
        assert response.status_code in (200, 302), (url, response.status_code)


def test_rendering_every_page_of_a_finished_session_changes_no_count(finished_demo, admin_client):
    from dashboard.record.models import WireCall

    run, sink = finished_demo
    sid = run.session_id
    calls = WireCall.objects.filter(session_id=sid).count()
    assert calls == run.steps
    before = _counts(sid)
    _read_everything(admin_client, sid, calls)
    for n in range(calls):
        assert admin_client.get(f"/sessions/{sid}/calls/{n}/sent.json").status_code == 200
    sink.flush(5.0)
    assert _counts(sid) == before

    # A session without a record (it ran before Scroll kept one): its inspector rebuilds
    # the window by replay, and says so; replaying still adds nothing to the session.
    WireCall.objects.filter(session_id=sid).delete()
    before = _counts(sid)
    page = admin_client.get(f"/sessions/{sid}/calls/{calls - 1}/").content.decode()
    assert "Rebuilt, not recorded" in page
    _read_everything(admin_client, sid, calls)
    sink.flush(5.0)
    assert _counts(sid) == before
