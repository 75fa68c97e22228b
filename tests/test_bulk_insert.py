"""The gateway's inserts (``dashboard.bulk_insert``): what they store is what ``bulk_create``
stores, ids included."""

from __future__ import annotations

import itertools

import pytest
from django.db import IntegrityError, transaction

from dashboard.bulk_insert import CHUNK_PARAMS, insert_rows
from dashboard.telemetry.models import SpanRecord

pytestmark = pytest.mark.django_db(transaction=True)

_ids = itertools.count(1)
_FIELDS = [f.attname for f in SpanRecord._meta.concrete_fields if not f.primary_key]


def _row(**over):
    n = next(_ids)
    values = dict(
        trace_id="cd" * 16,
        span_id=f"{n:016x}",
        parent_id=None if n % 2 else f"{n + 1:016x}",
        name="scroll.expand",
        session_id=f"s{n % 3}",
        kind="internal",
        start_ns=1_700_000_000_000_000_000 + n,
        end_ns=1_700_000_000_002_000_000 + n,
        duration_ms=2.5,
        status="ok",
        status_message="",
        attributes={
            "seq": n,
            "query": 'naïve ‘quotes’ "and" \\ slashes',
            "nested": [1, {"a": None}],
        },
        events=[{"name": "hit", "attributes": {"rank": 1.25}}],
        size_bytes=40 + n,
    )
    return SpanRecord(**(values | over))


def _stored(pk):
    row = SpanRecord.objects.get(pk=pk)
    return {name: getattr(row, name) for name in _FIELDS}


def test_rows_read_back_as_bulk_create_stores_them_with_their_ids():
    ours = [_row() for _ in range(5)]
    theirs = [_row() for _ in range(5)]
    with transaction.atomic():
        insert_rows(ours)
    SpanRecord.objects.bulk_create(theirs)
    assert all(r.pk is not None and not r._state.adding for r in ours)
    assert len({r.pk for r in ours}) == 5
    for mine, other in zip(ours, theirs, strict=True):
        got, want = _stored(mine.pk), _stored(other.pk)
        assert got == {name: getattr(mine, name) for name in _FIELDS}
        # The same values as bulk_create's row, but for what makes each row itself.
        differ = {k for k in got if got[k] != want[k]}
        assert differ <= {"span_id", "parent_id", "session_id", "start_ns", "end_ns",
                          "attributes", "size_bytes"}  # fmt: skip
        assert got["attributes"]["query"] == want["attributes"]["query"]
        assert got["events"] == want["events"]


def test_more_rows_than_one_statement_holds_each_get_their_own_id():
    rows = [_row(span_id=f"ff{i:014x}") for i in range((CHUNK_PARAMS // 13) * 2 + 7)]
    with transaction.atomic():
        insert_rows(rows)
    stored = dict(SpanRecord.objects.filter(span_id__startswith="ff").values_list("span_id", "pk"))
    assert len(stored) == len(rows)
    assert {r.span_id: r.pk for r in rows} == stored


def test_a_span_id_stored_before_refuses_the_batch_and_stores_none_of_it():
    first = _row()
    with transaction.atomic():
        insert_rows([first])
    again = [_row(), _row(span_id=first.span_id), _row()]
    with pytest.raises(IntegrityError), transaction.atomic():
        insert_rows(again)
    assert SpanRecord.objects.count() == 1


def test_the_sink_keeps_the_others_when_one_span_was_stored_before():
    from dashboard.telemetry.spans import ConsoleSpanSink

    sink = ConsoleSpanSink(start=False)
    first = _row()
    with transaction.atomic():
        insert_rows([first])
    batch = [_row(), _row(span_id=first.span_id), _row()]
    stored = sink._store(batch)
    assert [r.span_id for r in stored] == [batch[0].span_id, batch[2].span_id]
    assert SpanRecord.objects.count() == 3


def test_rows_naming_a_row_inserted_before_them_take_its_id():
    from dashboard.runs.models import CompressEvent, RunRecord

    run = RunRecord(session_id="bulk-1", task="t", model_name="m", kind="gateway")
    events = [CompressEvent(run=run, turn=i, tokens_before=100 + i) for i in range(3)]
    with transaction.atomic():
        insert_rows([run])
        insert_rows(events)
    stored = RunRecord.objects.get(session_id="bulk-1")
    assert stored.pk == run.pk and stored.kind == "gateway" and stored.status == "queued"
    assert stored.created_at == run.created_at
    assert list(stored.compressions.order_by("turn").values_list("turn", "tokens_before")) == [
        (0, 100), (1, 101), (2, 102)
    ]  # fmt: skip


def test_rows_of_two_models_or_with_an_id_are_refused_and_nothing_is_stored():
    from dashboard.runs.models import RunRecord

    run = RunRecord(session_id="bulk-2", task="t", model_name="m")
    with pytest.raises(ValueError, match="one model"), transaction.atomic():
        insert_rows([run, _row()])
    with transaction.atomic():
        insert_rows([run])
    with pytest.raises(ValueError, match="has an id"), transaction.atomic():
        insert_rows([run])
    assert SpanRecord.objects.count() == 0
    assert RunRecord.objects.filter(session_id="bulk-2").count() == 1


def test_a_refused_later_chunk_leaves_every_row_without_an_id():
    first = _row()
    with transaction.atomic():
        insert_rows([first])
    per = CHUNK_PARAMS // 13
    rows = [_row() for _ in range(per)] + [_row(span_id=first.span_id)]
    with pytest.raises(IntegrityError), transaction.atomic():
        insert_rows(rows)
    assert all(r.pk is None and r._state.adding for r in rows)
    assert SpanRecord.objects.count() == 1
