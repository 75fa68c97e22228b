"""The call record of a gateway session: every upstream call's request, exactly as the
scripted upstream received it, read back from the record byte for byte; usage and view as
sent; storage that grows with what is new."""

from __future__ import annotations

import itertools
import json

import openai
import pytest
from gateway_clients import assistant_of, make_key, oa

from dashboard.gateway.service import get_service
from dashboard.record.models import WireCall
from dashboard.record.read import recorded_call, session_calls
from dashboard.runs.models import TuningProfile

pytestmark = pytest.mark.django_db(transaction=True)


def _evicting_session(gateway, upstream, turns=24):
    profile = TuningProfile.objects.create(name="gw-record", context_size=3000)
    client = oa(gateway, make_key(upstream, profile=profile))
    history = [{"role": "system", "content": "You are terse."}]
    for i in range(turns):
        history.append({"role": "user", "content": f"turn {i}: " + "pack the crates " * 30})
        raw = client.chat.completions.with_raw_response.create(model="gpt-test", messages=history)
        history.append(assistant_of(raw.parse()))
    get_service().flush()
    return raw.headers["x-scroll-session"]


def test_every_recorded_request_is_what_the_upstream_received_byte_for_byte(gateway, upstream):
    session = _evicting_session(gateway, upstream)
    calls = session_calls(session)
    assert len(calls) == len(upstream.raw) >= 24
    for row, received in zip(calls, upstream.raw, strict=True):
        assert recorded_call(session, row.index).body == received
        assert row.source == "gateway" and row.url.endswith("/chat/completions")
        assert row.sends == 1 and row.status == "ok"
    # The upstream's usage as it reported it, and the reply as it came back.
    first = calls[0]
    assert first.usage["input_tokens"] == 120 and first.usage["output_tokens"] == 12
    assert first.reply["content"].startswith("ok 1")
    # The view's sections when each call was built; evictions happened (the window is small).
    assert all(c.view and c.view["total"] <= c.view["context_size"] for c in calls)
    assert any(recorded_call(session, c.index).dropped for c in calls[1:])


def test_the_record_grows_with_what_is_new_not_with_the_window(gateway, upstream):
    session = _evicting_session(gateway, upstream)
    calls = session_calls(session)
    sent = sum(c.body_bytes for c in calls)
    stored = sum(c.stored_bytes for c in calls)
    assert sent == sum(len(b) for b in upstream.raw)
    # Each call brings one new user message and one new assistant message; the rest is
    # copied by reference. The record is a fraction of the windows it reproduces.
    print(f"record {stored} B for {sent} B sent ({stored / sent:.3f})")
    assert stored < sent / 3, (stored, sent)
    # A call that only appended stores runs and the new messages' digests, not the window.
    appended = [c for c in calls[1:] if not recorded_call(session, c.index).dropped]
    assert appended
    pieces = next(f[2] for f in appended[-1].request if f[0] == "messages")
    assert isinstance(pieces[0], list)  # a run copied from the call before


def test_a_failed_upstream_call_is_recorded_with_its_error(gateway, upstream):
    from gateway_upstream import error

    key = make_key(upstream)
    upstream.then(error(500, "upstream exploded"))
    client = oa(gateway, key)
    with pytest.raises(openai.APIStatusError):
        client.chat.completions.create(
            model="gpt-test", messages=[{"role": "user", "content": "x"}]
        )
    get_service().flush()
    row = WireCall.objects.get()
    assert row.status == "error" and "upstream exploded" in row.error
    assert recorded_call(row.session_id, 0).body == upstream.raw[0]
    assert json.loads(upstream.raw[0])["messages"][-1]["content"].startswith("x")


def test_the_inspector_shows_each_call_as_the_upstream_received_it(gateway, upstream, admin_client):
    import html
    import re

    session = _evicting_session(gateway, upstream, turns=12)
    calls = session_calls(session)
    for row, received in zip(calls, upstream.raw, strict=True):
        page = admin_client.get(f"/sessions/{session}/calls/{row.index}/")
        assert page.status_code == 200
        text = page.content.decode()
        shown = re.search(r'<pre class="full wrap" id="call-sent">(.*?)</pre>', text, re.S)
        assert html.unescape(shown.group(1)) == received.decode()
        raw = admin_client.get(f"/sessions/{session}/calls/{row.index}/sent.json")
        assert raw.content == received
        assert "Rebuilt, not recorded" not in text
    # Usage as the upstream said it, not a rebuilt count.
    assert "input_tokens 120" in admin_client.get(f"/sessions/{session}/calls/0/").content.decode()


def test_each_recorded_call_names_its_chat_span_and_the_span_links_to_it(
    gateway, upstream, admin_client, ring
):
    from dashboard.console.inspector_links import call_url_for_span
    from dashboard.telemetry.models import SpanRecord

    session = _evicting_session(gateway, upstream, turns=6)
    chats = [s for s in ring.records() if s.name.startswith("chat ") and s.session_id == session]
    rows = session_calls(session)
    assert [r.span_id for r in rows] == [s.span_id for s in chats]
    assert {r.trace_id for r in rows} == {s.trace_id for s in chats}
    last = chats[-1]
    record = SpanRecord(
        session_id=session, name=last.name, span_id=last.span_id, trace_id=last.trace_id,
        attributes=dict(last.attributes),
    )  # fmt: skip
    found = admin_client.get(call_url_for_span(record))
    assert found.status_code == 302 and found["Location"].endswith(f"/calls/{rows[-1].index}/")


def test_the_budget_chart_has_one_point_per_upstream_call_at_its_own_time(
    gateway, upstream, admin_client
):
    session = _evicting_session(gateway, upstream, turns=24)
    calls = session_calls(session)
    data = json.loads(admin_client.get(f"/sessions/{session}/?part=charts").content)
    data = data["budget"]["data"]
    tail = next(t for t in data if t["name"] == "tail")
    assert len(tail["x"]) == len(calls) == len(set(tail["x"]))  # not bunched by batch
    assert tail["customdata"] == [f"call:{c.index}" for c in calls]
    totals = [sum(t["y"][i] for t in data if t.get("stackgroup")) for i in range(len(calls))]
    assert totals == [c.view["total"] for c in calls]
    # The evictions show as drops, one per eviction the record saw.
    drops = sum(1 for a, b in itertools.pairwise(totals) if b < a)
    evictions = sum(1 for c in calls[1:] if recorded_call(session, c.index).dropped)
    assert drops >= 1 and drops <= evictions, (totals, evictions)


def test_keep_against_evict_lists_the_evictions_the_session_made(gateway, upstream):
    from dashboard.runs.models import CompressEvent
    from dashboard.telemetry.cost import session_cost

    session = _evicting_session(gateway, upstream, turns=24)
    logged = list(
        CompressEvent.objects.filter(session_id=session, evicted_lo__isnull=False)
        .order_by("id")
        .values_list("evicted_lo", "evicted_hi")
    )
    assert logged
    cost = session_cost(session)
    assert [(s.lo, s.hi) for s in cost.spans] == logged
    # Per call: the upstream's usage, one row per upstream call.
    assert [(c.input_tokens, c.output_tokens) for c in cost.calls] == [(120, 12)] * len(
        upstream.raw
    )
