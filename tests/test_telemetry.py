"""The tracing helper, its sinks and metrics, and the spans the core writes."""

from __future__ import annotations

import threading

import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from scroll_core import telemetry
from scroll_core.errors import ConfigError, InvalidEvent, QueryRefused
from scroll_core.index import EvictionIndex
from scroll_core.kernel import Kernel, KernelConfig
from scroll_core.kernel.ms import MsCapability
from scroll_core.telemetry import RingSink, SpanRecord, span

OTEL_VARIABLES = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_SDK_DISABLED",
)


@pytest.fixture
def clean_env(monkeypatch):
    for name in OTEL_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def reader():
    return InMemoryMetricReader()


@pytest.fixture
def tel(clean_env, reader):
    """Telemetry on, with the ring and an in-memory metric reader; off again afterwards."""
    state = telemetry.configure(ring_size=1000, metric_readers=[reader])
    yield state
    telemetry.reset()


def metric_points(reader) -> dict[str, list[tuple[dict, float]]]:
    found: dict[str, list[tuple[dict, float]]] = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    value = getattr(point, "value", None)
                    if value is None:
                        value = point.sum
                    found.setdefault(metric.name, []).append((dict(point.attributes), value))
    return found


# ------------------------------------------------------------------------------ the helper
def test_span_is_a_shared_no_op_until_configured(clean_env):
    telemetry.reset()
    with span("scroll.expand", seq_lo=1) as first, span("scroll.expand") as second:
        assert first is second
        assert first.recording is False
        first.set(anything=object())
        first.error("not recorded")
    assert telemetry.enabled() is False
    assert telemetry.force_flush() is True


def test_a_span_records_scroll_and_dotted_attributes(tel):
    with span(
        "scroll.expand", {"gen_ai.operation.name": "x"}, seq_lo=3, seq_hi=9, skipped=None
    ) as s:
        assert s.recording
        s.set(block="t0:3-9", blocks=("t0:3-9", "t1:1-20"), ratio=0.5, flag=True)
    (record,) = tel.ring.records("scroll.expand")
    assert record.attributes == {
        "gen_ai.operation.name": "x",
        "scroll.seq_lo": 3,
        "scroll.seq_hi": 9,
        "scroll.block": "t0:3-9",
        "scroll.blocks": ["t0:3-9", "t1:1-20"],
        "scroll.ratio": 0.5,
        "scroll.flag": True,
    }
    assert record.status == "unset"
    assert record.parent_id is None
    assert len(record.trace_id) == 32 and len(record.span_id) == 16
    assert record.end_ns >= record.start_ns
    assert record.duration_ms == pytest.approx((record.end_ns - record.start_ns) / 1e6)


def test_long_strings_and_odd_values_are_bounded_and_stringified(tel):
    with span("scroll.sql_query", sql="x" * 5000, obj=object(), seqs=list(range(500))):
        pass
    (record,) = tel.ring.records("scroll.sql_query")
    assert len(record.attributes["scroll.sql"]) == telemetry.MAX_ATTRIBUTE_CHARS
    assert record.attributes["scroll.obj"].startswith("<object object")
    assert record.attributes["scroll.seqs"] == list(range(telemetry.MAX_ATTRIBUTE_ITEMS))


def test_nested_spans_link_to_their_parent_and_inherit_the_session(tel):
    with (
        telemetry.tool_span("repl_exec", session="s1", tool_call_id="call-7") as cell,
        span("scroll.expand", seq_lo=1, seq_hi=2),
        span("scroll.search"),
    ):
        pass
    with span("after"):
        pass
    outer = tel.ring.records("execute_tool repl_exec")[0]
    expand = tel.ring.records("scroll.expand")[0]
    search = tel.ring.records("scroll.search")[0]
    after = tel.ring.records("after")[0]
    assert outer.span_id == cell.span_id and outer.trace_id == cell.trace_id
    assert expand.parent_id == outer.span_id and expand.trace_id == outer.trace_id
    assert search.parent_id == expand.span_id
    assert {outer.session_id, expand.session_id, search.session_id} == {"s1"}
    assert after.session_id is None and after.parent_id is None
    assert outer.attributes["gen_ai.tool.call.id"] == "call-7"
    assert outer.attributes["scroll.tool_call_id"] == "call-7"
    assert tel.ring.children(outer) == [expand]


def test_session_scope_tags_spans_without_opening_one(tel):
    with telemetry.session_scope("s9"), span("scroll.append"):
        pass
    with span("scroll.append"):
        pass
    first, second = tel.ring.records("scroll.append")
    assert first.session_id == "s9" and first.parent_id is None
    assert second.session_id is None


def test_an_exception_marks_the_span_failed_and_is_reraised(tel):
    with pytest.raises(QueryRefused), span("scroll.sql_query"):
        raise QueryRefused("read-only: no")
    (record,) = tel.ring.records("scroll.sql_query")
    assert record.status == "error"
    assert record.status_message == "QueryRefused: read-only: no"
    assert record.attributes["error.type"] == "QueryRefused"
    assert record.events[0]["name"] == "exception"


def test_current_adds_to_the_open_span_without_ending_it(tel):
    assert telemetry.current().recording is False
    with span("scroll.expand"):
        with telemetry.current() as borrowed:
            borrowed.set(block="t0:1-4")
        telemetry.current().set(tier=0)
    (record,) = tel.ring.records("scroll.expand")
    assert record.attributes == {"scroll.block": "t0:1-4", "scroll.tier": 0}


def test_traced_decorates_a_function(tel):
    @telemetry.traced("scroll.fold", tier=1)
    def fold(n):
        return n * 2

    assert fold(4) == 8
    (record,) = tel.ring.records("scroll.fold")
    assert record.attributes == {"scroll.tier": 1}


def test_chat_span_follows_the_genai_conventions(tel):
    with telemetry.chat_span("policy-v1", session="s1", provider="scroll", compacted=True) as c:
        c.set_attributes(telemetry.usage(1200, 85, response_model="policy-v1"))
    (record,) = tel.ring.records("chat policy-v1")
    assert record.kind == "client"
    assert record.attributes == {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "policy-v1",
        "gen_ai.provider.name": "scroll",
        "gen_ai.conversation.compacted": True,
        "gen_ai.conversation.id": "s1",
        "gen_ai.usage.input_tokens": 1200,
        "gen_ai.usage.output_tokens": 85,
        "gen_ai.response.model": "policy-v1",
    }


# ------------------------------------------------------------------------------ sinks
class ListSink:
    def __init__(self):
        self.records: list[SpanRecord] = []

    def on_span(self, record: SpanRecord) -> None:
        self.records.append(record)


class BrokenSink:
    def on_span(self, record: SpanRecord) -> None:
        raise RuntimeError("disk full")


def test_every_sink_gets_every_span_and_a_broken_one_harms_nothing(clean_env, caplog):
    mine = ListSink()
    state = telemetry.configure(sinks=[BrokenSink(), mine], ring_size=10)
    try:
        with span("scroll.append", events=2):
            pass
    finally:
        telemetry.reset()
    assert [r.name for r in mine.records] == ["scroll.append"]
    assert [r.name for r in state.ring.records()] == ["scroll.append"]
    assert "disk full" in caplog.text
    assert mine.records[0].to_dict()["attributes"] == {"scroll.events": 2}


def test_a_sink_without_on_span_is_refused(clean_env):
    with pytest.raises(ConfigError, match="on_span"):
        telemetry.configure(sinks=[object()])
    assert telemetry.enabled() is False


def test_the_ring_is_bounded_and_says_how_many_it_dropped(clean_env):
    state = telemetry.configure(ring_size=3)
    try:
        for i in range(5):
            with span(f"s{i}"):
                pass
    finally:
        telemetry.reset()
    assert [r.name for r in state.ring.records()] == ["s2", "s3", "s4"]
    assert state.ring.overwritten == 2
    with pytest.raises(ConfigError):
        RingSink(0)


def test_configuring_twice_replaces_instead_of_stacking(clean_env):
    first_sink, second_sink = ListSink(), ListSink()
    first = telemetry.configure(sinks=[first_sink])
    second = telemetry.configure(sinks=[second_sink])
    try:
        with span("once"):
            pass
    finally:
        telemetry.reset()
    assert first.tracer_provider is second.tracer_provider
    assert first_sink.records == []
    assert [r.name for r in second_sink.records] == ["once"]
    assert first.ring.records() == [] and len(second.ring.records()) == 1
    # After reset nothing is recorded anywhere.
    with span("after reset"):
        pass
    assert len(second.ring.records()) == 1 and telemetry.state() is None


def test_otel_sdk_disabled_leaves_spans_off(clean_env, monkeypatch):
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    state = telemetry.configure()
    try:
        with span("x") as s:
            assert s.recording is False
    finally:
        telemetry.reset()
    assert state.ring.records() == []


def test_a_grpc_protocol_is_refused_with_a_clear_message(clean_env, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    with pytest.raises(ConfigError, match="http/protobuf"):
        telemetry.configure()


def test_otlp_is_off_without_the_standard_variables(tel):
    assert tel.otlp_traces is False and tel.otlp_metrics is False


def test_spans_from_many_threads_all_arrive(tel):
    def work(n):
        with telemetry.session_scope(f"s{n}"):
            for _ in range(50):
                with span("scroll.append"):
                    pass

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    records = tel.ring.records("scroll.append")
    assert len(records) == 400
    assert {r.session_id for r in records} == {f"s{n}" for n in range(8)}


# ------------------------------------------------------------------------------ metrics
def test_metrics_follow_from_the_spans(tel, reader):
    with span("scroll.expand", session="s1", blocks=["t0:1-4", "t1:5-40"]):
        pass
    with span("scroll.expand", session="s1", blocks=["t0:1-4"]):
        pass
    with span("scroll.expand", session="s1"):
        pass
    with span("scroll.evict", session="s1", tier=0, tokens=900):
        pass
    with span("scroll.fold", session="s1", tier=1):
        pass
    with span("scroll.fold", session="s1", tier=1, folds=4):
        pass
    with span("scroll.fold", session="s1", tier=1, folds=0):
        pass
    with span("scroll.compress", session="s1", tokens_after=3100, trigger_tokens=6000):
        pass
    with span("scroll.kernel.restart", kernel_tier="process"):
        pass
    with telemetry.chat_span("m", session="s1") as chat:
        chat.set_attributes(telemetry.usage(100, 7))
    points = metric_points(reader)
    s1 = {"gen_ai.conversation.id": "s1"}
    assert points["scroll.expands"] == [(s1, 3)]
    assert sorted(points["scroll.block.retrievals"], key=lambda p: p[0]["scroll.block"]) == [
        ({**s1, "scroll.block": "t0:1-4"}, 2),
        ({**s1, "scroll.block": "t1:5-40"}, 1),
    ]
    assert points["scroll.evictions"] == [({**s1, "scroll.tier": 0}, 1)]
    assert points["scroll.evicted.tokens"] == [(s1, 900)]
    assert points["scroll.folds"] == [({**s1, "scroll.tier": 1}, 5)]
    assert points["scroll.view.tokens"] == [(s1, 3100)]
    assert points["scroll.view.trigger_tokens"] == [(s1, 6000)]
    assert points["scroll.kernel.restarts"] == [({"scroll.kernel_tier": "process"}, 1)]
    usage = {p[0]["gen_ai.token.type"]: p[1] for p in points["gen_ai.client.token.usage"]}
    assert usage == {"input": 100, "output": 7}


# ------------------------------------------------------------------------------ the core's spans
def test_the_event_log_traces_appends_and_searches(tel, store):
    log = store
    log.append_many(
        [
            {
                "session_id": "s1",
                "kind": "context_msg",
                "content": "the zebra",
                "dedup_key": "a",
            },
            {"session_id": "s1", "kind": "model_turn", "content": "a lion", "dedup_key": "b"},
        ]
    )
    log.append_many(
        [{"session_id": "s1", "kind": "context_msg", "content": "again", "dedup_key": "a"}]
    )
    hits = log.search("zebra", k=5, session_id="s1")
    first, second = tel.ring.records("scroll.append")
    assert first.attributes == {
        "scroll.events": 2,
        "scroll.inserted": 2,
        "scroll.seq_lo": 1,
        "scroll.seq_hi": 2,
        "scroll.sessions": 1,
        "gen_ai.conversation.id": "s1",
    }
    assert second.attributes["scroll.inserted"] == 0
    (search,) = tel.ring.records("scroll.search")
    assert search.attributes["gen_ai.operation.name"] == "search_memory"
    assert search.attributes["scroll.query"] == "zebra"
    assert search.attributes["scroll.hits"] == len(hits) >= 1
    assert search.attributes["scroll.hit_seqs"] == [h.seq for h in hits]
    assert hits[0].seq == 1
    assert search.attributes["scroll.filter_session"] == "s1"


def test_a_failed_append_is_an_error_span(tel, store):
    with pytest.raises(InvalidEvent):
        store.append_many([{"session_id": "s1", "kind": "context_msg"}])
    (record,) = tel.ring.records("scroll.append")
    assert record.status == "error"
    assert record.attributes["error.type"] == "InvalidEvent"


@pytest.fixture
def history(store):
    """Ten facts, on SQLite and on PostgreSQL: the spans are the same on both."""
    for i in range(1, 11):
        store.append(session_id="s1", kind="context_msg", content=f"fact {i} about zebras")
    return store


@pytest.fixture
def index():
    idx = EvictionIndex()
    idx.add_eviction(1, 4, ["first four facts"], events=4, tokens=40)
    return idx


def test_ms_calls_in_a_cell_are_children_of_its_span(tel, history, index):
    cap = MsCapability(history, session_id="s1", block_resolver=index.block_for)
    with (
        Kernel(KernelConfig(sandbox="process"), host_functions=cap.functions()) as kernel,
        telemetry.session_scope("s1"),
    ):
        result = kernel.execute(
            "rows = ms.expand(3, 6)\n"
            "hits = ms.search('zebras', k=3)\n"
            "q = ms.sql_query('select seq from events where seq < 3')\n"
            "print(len(rows), len(hits), q['row_count'])",
            tool_call_id="call-1",
        )
        assert result.status == "ok", result
        bad = kernel.execute("ms.sql_query('delete from events')", tool="recall_history_python")
    cap.close()
    assert bad.status == "error"
    (cell, failed) = tel.ring.records(prefix="execute_tool")
    assert cell.name == "execute_tool repl_exec"
    assert cell.session_id == "s1"
    assert cell.attributes["gen_ai.tool.call.id"] == "call-1"
    assert cell.attributes["scroll.kernel_tier"] == "process"
    assert cell.attributes["scroll.status"] == "ok"
    assert cell.attributes["scroll.truncated"] is False
    assert cell.attributes["scroll.host_calls"] == 3
    assert cell.status == "unset"
    (expand,) = tel.ring.records("scroll.expand")
    assert expand.parent_id == cell.span_id and expand.trace_id == cell.trace_id
    assert expand.session_id == "s1"
    assert expand.attributes["scroll.seq_lo"] == 3
    assert expand.attributes["scroll.seq_hi"] == 6
    assert expand.attributes["scroll.events"] == 4
    # seqs 3 and 4 were evicted into block t0:1-4; 5 and 6 are still in view.
    assert expand.attributes["scroll.evicted"] is True
    assert expand.attributes["scroll.block"] == "t0:1-4"
    assert expand.attributes["scroll.blocks"] == ["t0:1-4"]
    assert expand.attributes["scroll.tier"] == 0
    (memory,) = tel.ring.records("search_memory")
    assert memory.parent_id == cell.span_id
    assert memory.attributes["gen_ai.operation.name"] == "search_memory"
    assert memory.attributes["scroll.query"] == "zebras"
    assert memory.attributes["scroll.hits"] == 3
    (inner,) = tel.ring.records("scroll.search")
    assert inner.parent_id == memory.span_id
    sql_ok, sql_refused = tel.ring.records("scroll.sql_query")
    assert sql_ok.parent_id == cell.span_id
    assert sql_ok.attributes["scroll.rows"] == 2
    assert sql_ok.attributes["scroll.truncated"] is False
    assert sql_refused.parent_id == failed.span_id
    assert sql_refused.status == "error"
    assert sql_refused.attributes["error.type"] == "QueryRefused"
    assert failed.name == "execute_tool recall_history_python"
    assert failed.status == "error"
    assert failed.attributes["error.type"] == bad.error.type == "HostFunctionError"


def test_an_expand_outside_every_evicted_block_says_so(tel, history, index):
    cap = MsCapability(history, session_id="s1", block_resolver=index.block_for)
    try:
        cap.functions()["ms.expand"](7, 8)
    finally:
        cap.close()
    (expand,) = tel.ring.records("scroll.expand")
    assert expand.attributes["scroll.evicted"] is False
    assert "scroll.block" not in expand.attributes


def test_a_broken_resolver_does_not_fail_the_expand(tel, history):
    def resolver(seq):
        raise RuntimeError("index gone")

    cap = MsCapability(history, session_id="s1", block_resolver=resolver)
    try:
        assert len(cap.functions()["ms.expand"](1, 2)) == 2
    finally:
        cap.close()
    (expand,) = tel.ring.records("scroll.expand")
    assert expand.status == "unset" and expand.attributes["scroll.evicted"] is False


def test_a_timed_out_cell_and_its_restart_are_traced(tel):
    config = KernelConfig(sandbox="process", timeout_s=10, grace_s=0.3)
    with Kernel(config) as kernel:
        result = kernel.execute(
            "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
            "while True:\n    time.sleep(0.01)",
            timeout=0.3,
        )
    assert result.status == "timeout" and result.variables_lost
    (cell,) = tel.ring.records(prefix="execute_tool")
    assert cell.status == "error"
    assert cell.attributes["error.type"] == "timeout"
    assert cell.attributes["scroll.variables_lost"] is True
    (restart,) = tel.ring.records("scroll.kernel.restart")
    assert restart.parent_id == cell.span_id
    assert restart.attributes["scroll.restarts"] == 1


def test_an_exception_event_keeps_a_bounded_message_and_stack_trace_with_a_marker(tel):
    huge = "x" * 3_900_000
    with pytest.raises(ValueError), span("scroll.days_between"):
        raise ValueError(f"not a date: {huge!r}")
    (record,) = tel.ring.records("scroll.days_between")
    (event,) = record.events
    attributes = event["attributes"]
    assert attributes["exception.type"] == "ValueError"
    for name in ("exception.message", "exception.stacktrace"):
        assert len(attributes[name]) < telemetry.MAX_EXCEPTION_CHARS + 100
        assert "characters cut]" in attributes[name]
    assert attributes["exception.message"].startswith("not a date: 'xxx")
    # The end of the stack trace (the exception's own line) is kept as well as the start.
    assert attributes["exception.stacktrace"].rstrip().endswith("xxx'")
    assert len(record.status_message) <= telemetry.MAX_ATTRIBUTE_CHARS


def test_an_exception_that_cannot_be_printed_still_leaves_its_event(tel):
    class Unprintable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    with pytest.raises(Unprintable), span("scroll.expand"):
        raise Unprintable
    (record,) = tel.ring.records("scroll.expand")
    assert record.events[0]["attributes"]["exception.message"].startswith("<unprintable")


def test_a_short_exception_is_kept_whole():
    assert telemetry.cut("short", 10) == "short"
    text = "a" * 50 + "b" * 50
    cut = telemetry.cut(text, 20)
    assert cut.startswith("a" * 10) and cut.endswith("b" * 10) and "80 characters cut" in cut


def test_other_instrumentation_s_event_values_are_capped_by_the_sdk_limits(tel):
    from opentelemetry import trace as otel_trace

    tracer = otel_trace.get_tracer("someone-else")
    with tracer.start_as_current_span("their.span") as theirs:
        theirs.add_event("big", {"value": "y" * 1_000_000})
    (record,) = tel.ring.records("their.span")
    # The limit leaves room for a chat span's message content, which its own cap keeps
    # within it (tests/test_genai_content.py).
    assert tel.attribute_chars >= telemetry.MAX_ANY_ATTRIBUTE_CHARS
    assert len(record.events[0]["attributes"]["value"]) == tel.attribute_chars


def test_span_metrics_are_derived_only_when_something_reads_them(clean_env, reader):
    # With no reader and no OTLP, a measurement per span would go nowhere: none is taken.
    try:
        state = telemetry.configure(ring_size=10, otlp=False)
        derived = [type(p).__name__ for p in telemetry._SWITCH._processors]
        assert "_SpanMetrics" not in derived
        with telemetry.span("scroll.compress", session="s", tokens_after=5):
            pass
        assert state.ring is not None and state.ring.records("scroll.compress")  # spans flow
        telemetry.configure(ring_size=10, otlp=False, metric_readers=[reader])
        assert "_SpanMetrics" in [type(p).__name__ for p in telemetry._SWITCH._processors]
    finally:
        telemetry.reset()
