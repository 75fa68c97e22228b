"""Storing a batch of captured calls from several sessions at once (dashboard.record.store):
each session numbered and delta-encoded on its own, a blob two sessions share stored and
charged once, and every call read back byte for byte."""

from __future__ import annotations

import json

import pytest

from dashboard.record import store
from dashboard.record.models import WireBlob, WireCall
from dashboard.record.read import recorded_call
from scroll_core import wire

pytestmark = pytest.mark.django_db

SHARED = "a long system prompt both sessions send " * 40


def _call(sid: str, *contents: str) -> wire.WireCall:
    messages = [{"role": "system", "content": SHARED}]
    messages += [{"role": "user", "content": c} for c in contents]
    body = json.dumps({"model": "m", "messages": messages}).encode()
    return wire.WireCall(sid, "m", "gateway", body=body, sends=1, started_at=1.0e9)


def test_a_batch_of_sessions_is_numbered_per_session_and_reads_back_byte_for_byte():
    store.forget()
    store.store_calls([_call("old", "q0")])  # a session the record holds already
    batch = [
        _call("a", "a1"),
        _call("old", "q0", "q1"),
        _call("b", "b1"),
        _call("a", "a1", "a2"),
    ]
    rows = store.store_calls(batch)

    assert [(r.session_id, r.index) for r in rows] == [("a", 0), ("a", 1), ("old", 1), ("b", 0)]
    by_place = {(r.session_id, r.index): r for r in rows}
    for (sid, index), call in zip(by_place, [batch[0], batch[3], batch[1], batch[2]], strict=True):
        assert recorded_call(sid, index).body == call.body
    # The system prompt is one blob, brought by "old" before the batch: no call of the
    # batch is charged for it, so "b"'s first call costs what its own fields and "b1" cost.
    system = json.dumps({"role": "system", "content": SHARED})
    assert WireBlob.objects.filter(body__contains=SHARED[:80]).count() <= 1, system
    assert by_place[("b", 0)].stored_bytes < len(SHARED)
    assert by_place[("a", 0)].stored_bytes < len(SHARED)
    assert WireCall.objects.count() == 5


def test_a_session_stored_after_a_restart_continues_its_numbering_from_the_record():
    store.forget()
    store.store_calls([_call("s", "one"), _call("s", "one", "two")])
    store.forget()  # what a new process knows: nothing but the record
    (row,) = store.store_calls([_call("s", "one", "two", "three")])
    assert row.index == 2
    assert recorded_call("s", 2).body == _call("s", "one", "two", "three").body
