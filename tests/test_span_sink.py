from __future__ import annotations

import itertools
import time

import pytest
from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer

from dashboard import groups
from dashboard.telemetry import spans as spans_module
from dashboard.telemetry.models import Alert, AlertRule, SpanRecord
from dashboard.telemetry.spans import ConsoleSpanSink
from scroll_core import telemetry
from scroll_core.telemetry import SpanRecord as CoreSpan

_ids = itertools.count(1)


def _core(name="scroll.search", session="s1", **attributes):
    now = time.time_ns()
    return CoreSpan(
        trace_id="ab" * 16,
        span_id=f"{next(_ids):016x}",
        parent_id=None,
        name=name,
        start_ns=now - 2_000_000,
        end_ns=now,
        duration_ms=2.0,
        status="ok",
        status_message=None,
        attributes=attributes,
        session_id=session,
    )


class Listener:
    """A channel joined to groups on the in-memory layer, read without a consumer."""

    def __init__(self, *names):
        self.layer = get_channel_layer()
        self.channel = async_to_sync(self.layer.new_channel)()
        for name in names:
            async_to_sync(self.layer.group_add)(name, self.channel)

    def receive(self):
        return async_to_sync(self.layer.receive)(self.channel)

    def receive_many(self, count):
        """``count`` messages read on one event loop (Redis's layer buffers per loop)."""

        async def take():
            return [await self.layer.receive(self.channel) for _ in range(count)]

        return async_to_sync(take)()


@pytest.fixture
def sink():
    sink = ConsoleSpanSink(start=False)
    yield sink
    sink.close()


@pytest.mark.django_db
def test_it_stores_spans_and_sends_them_to_the_global_and_session_groups(sink):
    listener = Listener(groups.SPANS, groups.session_group("locomo:conv-26"))

    rows = sink.process([_core(session="locomo:conv-26", **{"scroll.k": 5})])

    stored = SpanRecord.objects.get()
    assert stored.session_id == "locomo:conv-26"
    assert stored.attributes == {"scroll.k": 5}
    first, second = listener.receive(), listener.receive()
    assert first == second
    assert first["type"] == "spans.finished"
    assert first["spans"] == [rows[0].to_dict()]
    assert first["spans"][0]["name"] == "scroll.search"
    # Rendered once by the sink, for every socket: the row, and the frame holding it.
    (row,) = first["rows"]
    assert row.strip().startswith(f'<tr id="span-{rows[0].span_id}"')
    assert first["frame"].startswith('<tbody hx-swap-oob="afterbegin:#span-rows">')
    assert row in first["frame"]


@pytest.mark.django_db
def test_a_span_that_trips_a_rule_sends_an_alert(sink):
    listener = Listener(groups.ALERTS)

    sink.process([_core("scroll.compress", **{"error.type": "ContextWindowUnfit"})])

    message = listener.receive()
    assert message["type"] == "alert.changed"
    assert message["alert"]["kind"] == "context_unfit"
    assert Alert.objects.get().session_id == "s1"


@pytest.mark.django_db
def test_retention_prunes_the_oldest_spans(sink, settings):
    settings.SCROLL_SPAN_RETENTION = 3
    sink.process([_core(name=f"op{i}") for i in range(5)])

    assert sink.prune() == 2
    assert list(SpanRecord.objects.order_by("id").values_list("name", flat=True)) == [
        "op2",
        "op3",
        "op4",
    ]


@pytest.mark.django_db
def test_retention_in_bytes_prunes_the_oldest_heavy_spans_and_counts_them(sink, settings):
    settings.SCROLL_SPAN_RETENTION = 1000  # the count alone would keep every one
    settings.SCROLL_SPAN_RETENTION_BYTES = 50_000
    sink.process([_core(name=f"heavy{i}", blob="z" * 1000) for i in range(10)])
    sink.process([_core(name=f"light{i}") for i in range(3)])
    sizes = dict(SpanRecord.objects.values_list("name", "size_bytes"))
    assert sizes["heavy0"] > 1000 and sizes["light0"] < 200

    assert sink.prune() == 0  # ~10 kB: under the budget
    settings.SCROLL_SPAN_RETENTION_BYTES = 3_500
    pruned = sink.prune()

    kept = list(SpanRecord.objects.order_by("id").values_list("name", flat=True))
    assert kept[-3:] == ["light0", "light1", "light2"]  # the newest stay
    assert kept[0].startswith("heavy") and len(kept) == 13 - pruned
    assert sum(SpanRecord.objects.values_list("size_bytes", flat=True)) <= 3_500
    assert sink.stats()["pruned_for_bytes"] == pruned > 0


@pytest.mark.django_db
def test_pruning_spans_for_bytes_raises_one_alert_that_later_prunes_bump(sink, settings):
    settings.SCROLL_SPAN_RETENTION = 1000
    settings.SCROLL_SPAN_RETENTION_BYTES = 50_000
    sink.process([_core(name=f"heavy{i}", blob="z" * 1000) for i in range(10)])
    assert sink.prune() == 0
    assert not Alert.objects.filter(rule__kind=AlertRule.SPANS_PRUNED).exists()

    settings.SCROLL_SPAN_RETENTION_BYTES = 6_000
    first = sink.prune()
    alert = Alert.objects.get(rule__kind=AlertRule.SPANS_PRUNED)
    assert alert.state == Alert.OPEN and alert.count == 1 and alert.session_id == ""
    assert f"{first:,} of the oldest stored spans were pruned" in alert.message
    assert "6,000 bytes (SCROLL_SPAN_RETENTION_BYTES)" in alert.message

    sink.process([_core(name=f"more{i}", blob="z" * 1000) for i in range(4)])
    second = sink.prune()
    alert.refresh_from_db()
    assert second > 0 and alert.count == 2
    assert f"{first + second:,} since this process started" in alert.message
    assert Alert.objects.filter(rule__kind=AlertRule.SPANS_PRUNED).count() == 1


@pytest.mark.django_db
def test_a_span_id_seen_twice_is_stored_once(sink):
    span = _core()
    sink.process([span])
    sink.process([span, _core()])

    assert SpanRecord.objects.count() == 2


def test_a_full_queue_drops_and_counts_without_blocking_or_raising():
    # No consumer thread runs (start=False): a blocking put would hang here for good.
    sink = ConsoleSpanSink(maxsize=2, start=False)
    for _ in range(5):
        sink.on_span(_core())

    assert sink.stats()["dropped"] == 3
    assert sink.stats()["queued"] == 2


@pytest.mark.django_db(transaction=True)
def test_spans_of_instrumented_code_reach_the_database_from_the_worker_thread():
    sink = ConsoleSpanSink()
    telemetry.configure(sinks=[sink], ring_size=None, otlp=False)
    try:
        with (
            telemetry.span("scroll.expand", session="demo", blocks=["0:1-9"]),
            telemetry.span("scroll.search", k=5),
        ):
            pass
        assert sink.flush(5.0)
    finally:
        telemetry.reset()
        sink.close()

    rows = {r.name: r for r in SpanRecord.objects.all()}
    assert set(rows) == {"scroll.expand", "scroll.search"}
    assert rows["scroll.search"].session_id == "demo"  # inherited from its parent
    assert rows["scroll.search"].parent_id == rows["scroll.expand"].span_id
    assert rows["scroll.expand"].attributes["scroll.blocks"] == ["0:1-9"]
    assert sink.stats()["errors"] == 0


@pytest.mark.django_db(transaction=True)
def test_a_database_failure_is_logged_and_never_reaches_the_agent(monkeypatch, caplog):
    sink = ConsoleSpanSink()

    def broken(rows):
        raise RuntimeError("disk full")

    monkeypatch.setattr(sink, "_store", broken)
    telemetry.configure(sinks=[sink], ring_size=None, otlp=False)
    try:
        with telemetry.span("scroll.search", session="s"):
            pass
        assert sink.flush(5.0)
    finally:
        telemetry.reset()
        sink.close()

    assert sink.stats()["errors"] == 1
    assert "span batch of 1 failed" in caplog.text


class ServerLoop:
    """An event loop running in a thread of its own, as daphne's runs beside the sink."""

    def __init__(self):
        import asyncio
        import threading

        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="server-loop")
        self.thread.start()

    def run(self, coro, timeout=5.0):
        import asyncio

        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self):
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


@pytest.fixture
def server_loop():
    from dashboard import push

    server = ServerLoop()
    push.remember_server_loop(server.loop)
    yield server
    server.close()
    assert push.server_loop() is None  # a stopped loop is never used again


@pytest.mark.django_db
def test_sends_from_the_worker_thread_run_on_the_servers_loop(sink, server_loop):
    import asyncio
    import threading

    layer = get_channel_layer()
    sent_on = []
    real_group_send = layer.group_send

    async def spy(group, message):
        sent_on.append(threading.current_thread().name)
        await real_group_send(group, message)

    async def listen():
        channel = await layer.new_channel()
        await layer.group_add(groups.SPANS, channel)
        # Already waiting on the queue when the span arrives: the wake-up has to come from
        # the server's own loop, or this receive never returns.
        return channel, asyncio.ensure_future(layer.receive(channel))

    channel, waiting = server_loop.run(listen())
    layer.group_send = spy
    try:
        # This (test) thread stands for the sink's worker: any thread but the server's.
        sink.process([_core(session="t1")])

        async def result():
            return await asyncio.wait_for(waiting, 5)

        message = server_loop.run(result(), timeout=6)
    finally:
        del layer.group_send
        server_loop.run(layer.group_discard(groups.SPANS, channel))
    assert message["type"] == "spans.finished"
    assert message["spans"][0]["session_id"] == "t1"
    assert sent_on and set(sent_on) == {"server-loop"}


@pytest.mark.django_db
def test_without_a_running_server_loop_it_falls_back_to_async_to_sync(sink):
    import asyncio

    from dashboard import push

    stopped = asyncio.new_event_loop()
    push.remember_server_loop(stopped)
    try:
        assert push.server_loop() is None
        listener = Listener(groups.SPANS)
        sink.process([_core(session="t2")])
        assert listener.receive()["spans"][0]["session_id"] == "t2"
    finally:
        stopped.close()


@pytest.mark.django_db
def test_a_batch_goes_out_as_one_message_per_group(sink):
    listener = Listener(groups.SPANS, groups.session_group("a"))

    sink.process([_core(session="a"), _core(session="b"), _core(session="a")])

    # Redis orders messages by send time, so two sent within its clock's resolution may swap.
    of_a, everything = sorted(listener.receive_many(2), key=lambda m: len(m["spans"]))
    assert everything["type"] == of_a["type"] == "spans.finished"
    assert [s["session_id"] for s in everything["spans"]] == ["a", "b", "a"]
    assert [s["session_id"] for s in of_a["spans"]] == ["a", "a"]


def _in_memory_layer():
    """The in-memory layer, emptied of the groups earlier tests' listeners joined."""
    layer = get_channel_layer()
    if not isinstance(layer, InMemoryChannelLayer):
        pytest.skip("behind Redis a socket of another process may be in any group")
    async_to_sync(layer.flush)()


@pytest.mark.django_db
def test_a_span_no_socket_can_hear_is_stored_but_neither_rendered_nor_sent(sink, monkeypatch):
    _in_memory_layer()
    rendered = []

    def render(span):
        rendered.append(span["session_id"])
        return real_render(span)

    real_render = spans_module.render_row
    monkeypatch.setattr(spans_module, "render_row", render)
    listener = Listener(groups.session_group("heard"))

    sink.process([_core(session="unheard"), _core(session="heard")])

    assert sorted(SpanRecord.objects.values_list("session_id", flat=True)) == ["heard", "unheard"]
    assert rendered == ["heard"]
    (message,) = listener.receive_many(1)
    assert [s["session_id"] for s in message["spans"]] == ["heard"]
    # Nobody was in the global group: nothing queued there for a socket that joins now.
    assert not get_channel_layer().groups.get(groups.SPANS)


@pytest.mark.django_db
def test_a_run_no_socket_can_hear_costs_no_summary_and_goes_nowhere(monkeypatch):
    _in_memory_layer()
    from dashboard.runs import notify
    from dashboard.runs.models import RunRecord

    summarised = []
    real_summary = RunRecord.summary

    def summary(run):
        summarised.append(run.session_id)
        return real_summary(run)

    monkeypatch.setattr(RunRecord, "summary", summary)
    heard_run = RunRecord.objects.create(session_id="run:heard", task="t")
    quiet_run = RunRecord.objects.create(session_id="run:quiet", task="t")
    listener = Listener(groups.session_group("run:heard"))

    notify.push_sessions([quiet_run, heard_run])

    assert summarised == ["run:heard"]
    (message,) = listener.receive_many(1)
    assert message["type"] == "session.changed"
    assert message["session_id"] == "run:heard"
    assert message["summary"]["session_id"] == "run:heard"
