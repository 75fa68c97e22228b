"""Export over OTLP/HTTP to a real receiver on loopback, decoding the protobuf it gets."""

from __future__ import annotations

import gzip
import json
import logging
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from scroll_core import EventLog, telemetry
from scroll_core.index import EvictionIndex
from scroll_core.kernel import Kernel, KernelConfig
from scroll_core.kernel.ms import MsCapability

OTEL_VARIABLES = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_SDK_DISABLED",
    "OTEL_TRACES_EXPORTER",
    "OTEL_METRICS_EXPORTER",
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
    "SCROLL_TRACE_PROJECT",
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
)


class Receiver(ThreadingHTTPServer):
    """A minimal OTLP/HTTP collector: keeps every decoded request."""

    daemon_threads = True

    def __init__(self, refuse: dict[str, int] | None = None):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.traces: list[ExportTraceServiceRequest] = []
        self.metrics: list[ExportMetricsServiceRequest] = []
        self.content_types: set[str] = set()
        self.got = threading.Condition()
        self.refuse = refuse or {}  # path -> the status it answers, as Phoenix does /v1/metrics
        self.refused: list[str] = []

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def spans(self) -> list:
        return [
            s
            for request in self.traces
            for resource in request.resource_spans
            for scope in resource.scope_spans
            for s in scope.spans
        ]

    def metric_names(self) -> dict[str, object]:
        return {
            m.name: m
            for request in self.metrics
            for resource in request.resource_metrics
            for scope in resource.scope_metrics
            for m in scope.metrics
        }


class _Handler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        self.server.content_types.add(self.headers.get("Content-Type", ""))
        if self.path in self.server.refuse:
            with self.server.got:
                self.server.refused.append(self.path)
                self.server.got.notify_all()
            self.send_response(self.server.refuse[self.path])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.path == "/v1/traces":
            request, reply = ExportTraceServiceRequest(), ExportTraceServiceResponse()
            request.ParseFromString(body)
            target = self.server.traces
        elif self.path == "/v1/metrics":
            request, reply = ExportMetricsServiceRequest(), ExportMetricsServiceResponse()
            request.ParseFromString(body)
            target = self.server.metrics
        else:
            self.send_response(404)
            self.end_headers()
            return
        with self.server.got:
            target.append(request)
            self.server.got.notify_all()
        payload = reply.SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format, *args):
        pass


@contextmanager
def serving(**options):
    server = Receiver(**options)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture
def receiver():
    with serving() as server:
        yield server


@pytest.fixture
def exporting(receiver, monkeypatch):
    for name in OTEL_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    state = telemetry.configure(ring_size=100)
    yield state
    telemetry.reset()


def attributes(span_or_point) -> dict:
    found = {}
    for kv in span_or_point.attributes:
        value = kv.value
        kind = value.WhichOneof("value")
        if kind == "array_value":
            found[kv.key] = [getattr(v, v.WhichOneof("value")) for v in value.array_value.values]
        else:
            found[kv.key] = getattr(value, kind)
    return found


def test_spans_and_metrics_reach_an_otlp_http_receiver(exporting, receiver, tmp_path):
    assert exporting.otlp_traces and exporting.otlp_metrics
    index = EvictionIndex()
    index.add_eviction(1, 3, ["the zebra facts"], events=3, tokens=30)
    with EventLog(tmp_path / "eventlog.sqlite3") as log:
        for i in range(1, 7):
            log.append(session_id="s1", kind="context_msg", content=f"zebra fact {i}")
        cap = MsCapability(log, session_id="s1", block_resolver=index.block_for)
        with (
            Kernel(KernelConfig(sandbox="process"), host_functions=cap.functions()) as kernel,
            telemetry.session_scope("s1"),
        ):
            result = kernel.execute(
                "print(len(ms.expand(2, 4)), len(ms.search('zebra', k=2)))", tool_call_id="c-1"
            )
        cap.close()
    assert result.stdout == "3 2\n"
    assert telemetry.force_flush() is True

    spans = receiver.spans()
    by_name = {s.name: s for s in spans}
    cell = by_name["execute_tool repl_exec"]
    expand = by_name["scroll.expand"]
    memory = by_name["search_memory"]
    assert expand.parent_span_id == cell.span_id
    assert memory.parent_span_id == cell.span_id
    assert by_name["scroll.search"].parent_span_id == memory.span_id
    assert expand.trace_id == cell.trace_id == memory.trace_id
    assert cell.parent_span_id == b""
    assert len(cell.trace_id) == 16 and len(cell.span_id) == 8

    cell_attrs = attributes(cell)
    assert cell_attrs["gen_ai.operation.name"] == "execute_tool"
    assert cell_attrs["gen_ai.tool.name"] == "repl_exec"
    assert cell_attrs["gen_ai.tool.call.id"] == "c-1"
    assert cell_attrs["gen_ai.conversation.id"] == "s1"
    assert cell_attrs["scroll.kernel_tier"] == "process"
    assert cell_attrs["scroll.status"] == "ok"
    expand_attrs = attributes(expand)
    assert expand_attrs["scroll.seq_lo"] == 2 and expand_attrs["scroll.seq_hi"] == 4
    assert expand_attrs["scroll.block"] == "t0:1-3"
    assert expand_attrs["scroll.blocks"] == ["t0:1-3"]
    assert expand_attrs["gen_ai.conversation.id"] == "s1"
    assert attributes(memory)["scroll.query"] == "zebra"
    appends = [s for s in spans if s.name == "scroll.append"]
    assert len(appends) == 6 and all(s.parent_span_id == b"" for s in appends)

    resource = {
        kv.key: kv.value.string_value
        for kv in receiver.traces[0].resource_spans[0].resource.attributes
    }
    assert resource["service.name"] == "scroll"
    assert resource["openinference.project.name"] == "scroll"
    assert receiver.content_types == {"application/x-protobuf"}

    metrics = receiver.metric_names()
    (expands,) = metrics["scroll.expands"].sum.data_points
    assert expands.as_int == 1 and attributes(expands) == {"gen_ai.conversation.id": "s1"}
    (retrieval,) = metrics["scroll.block.retrievals"].sum.data_points
    assert attributes(retrieval)["scroll.block"] == "t0:1-3" and retrieval.as_int == 1
    assert "scroll.cell.duration" in metrics


def test_a_receiver_that_is_down_does_not_break_the_instrumented_code(monkeypatch, tmp_path):
    for name in OTEL_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    # A port nothing listens on: bind, read the port, close.
    probe = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    port = probe.server_address[1]
    probe.server_close()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"http://127.0.0.1:{port}/v1/traces")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
    state = telemetry.configure(ring_size=10)
    try:
        assert state.otlp_traces and not state.otlp_metrics
        with EventLog(tmp_path / "eventlog.sqlite3") as log:
            assert log.append(session_id="s1", kind="context_msg", content="still written") == 1
    finally:
        telemetry.reset()
    assert [r.name for r in state.ring.records()] == ["scroll.append"]


@pytest.fixture
def no_otel_env(monkeypatch):
    for name in OTEL_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def test_each_signal_goes_to_its_own_endpoint(no_otel_env, monkeypatch):
    with serving() as traces_at, serving() as metrics_at:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"{traces_at.endpoint}/v1/traces")
        monkeypatch.setenv(
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", f"{metrics_at.endpoint}/v1/metrics"
        )
        state = telemetry.configure(ring_size=10)
        try:
            assert state.otlp_traces and state.otlp_metrics
            with telemetry.span("scroll.expand", seq_lo=1, seq_hi=2):
                pass
            assert telemetry.force_flush() is True
        finally:
            telemetry.reset()
    assert [s.name for s in traces_at.spans()] == ["scroll.expand"] and not traces_at.metrics
    assert "scroll.expands" in metrics_at.metric_names() and not metrics_at.traces


def test_metrics_exporter_none_sends_only_the_traces(no_otel_env, monkeypatch, receiver):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "none")
    state = telemetry.configure(ring_size=10, metric_interval_ms=20)
    try:
        assert state.otlp_traces and not state.otlp_metrics
        with telemetry.span("scroll.expand"):
            pass
        assert telemetry.force_flush() is True
    finally:
        telemetry.reset()
    assert [s.name for s in receiver.spans()] == ["scroll.expand"]
    assert not receiver.metrics and not receiver.refused
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    monkeypatch.delenv("OTEL_METRICS_EXPORTER")
    state = telemetry.configure(ring_size=10)
    telemetry.reset()
    assert not state.otlp_traces and state.otlp_metrics


def test_a_backend_that_refuses_metrics_is_one_warning_not_one_a_minute(
    no_otel_env, monkeypatch, caplog
):
    # Arize Phoenix takes traces at /v1/traces and answers 405 to /v1/metrics.
    with serving(refuse={"/v1/metrics": 405}) as phoenix_like:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", phoenix_like.endpoint)
        state = telemetry.configure(ring_size=10, metric_interval_ms=20)
        try:
            assert state.otlp_metrics
            with telemetry.span("scroll.expand"):
                pass
            with phoenix_like.got:
                assert phoenix_like.got.wait_for(lambda: phoenix_like.refused, timeout=10)
            time.sleep(0.5)  # some 25 export intervals more
            with telemetry.span("scroll.expand"):
                pass
            assert telemetry.force_flush() is True
        finally:
            telemetry.reset()
    assert phoenix_like.refused == ["/v1/metrics"], "asked once, then never again"
    assert [s.name for s in phoenix_like.spans()] == ["scroll.expand", "scroll.expand"]
    loud = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(loud) == 1, [r.getMessage() for r in loud]
    said = loud[0].getMessage()
    assert loud[0].name == "scroll.telemetry" and "HTTP 405" in said
    assert f"{phoenix_like.endpoint}/v1/metrics" in said and "OTEL_METRICS_EXPORTER=none" in said


def chat_over_otlp(receiver, messages):
    from scroll_core.agent.steps import traced_call
    from scroll_core.models import ModelReply, Usage

    traced_call(
        "up-model",
        lambda: ModelReply("done", usage=Usage(1200, 3), model="up-model-0001"),
        session="s1",
        messages=messages,
    )
    assert telemetry.force_flush() is True
    (chat,) = [s for s in receiver.spans() if s.name == "chat up-model"]
    return attributes(chat)


def test_message_content_reaches_the_backend_whole_past_the_old_16k_limit(
    exporting, receiver, monkeypatch
):
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    long = "the zebra facts " * 2500  # 40,000 characters: more than 16,384, less than the cap
    sent = chat_over_otlp(receiver, [{"role": "system", "content": "Be exact."},
                                     {"role": "user", "content": long}])  # fmt: skip
    assert json.loads(sent["gen_ai.input.messages"]) == [
        {"role": "user", "parts": [{"type": "text", "content": long}]}
    ]
    assert json.loads(sent["gen_ai.system_instructions"]) == [
        {"type": "text", "content": "Be exact."}
    ]
    assert json.loads(sent["gen_ai.output.messages"])[0]["parts"][0]["content"] == "done"
    assert sent["llm.token_count.prompt"] == 1200 and sent["openinference.span.kind"] == "LLM"


def test_a_cap_above_the_attribute_limit_is_held_to_it_so_the_json_stays_whole(
    exporting, receiver, monkeypatch
):
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    monkeypatch.setenv("SCROLL_GENAI_CONTENT_MAX_BYTES", str(10 * exporting.attribute_chars))
    long = "y" * (3 * exporting.attribute_chars)
    sent = chat_over_otlp(receiver, [{"role": "user", "content": long}])
    text = sent["gen_ai.input.messages"]
    assert len(text.encode()) <= exporting.attribute_chars
    content = json.loads(text)[0]["parts"][0]["content"]
    assert content.startswith("yyy") and "characters cut]…" in content
    assert sent["scroll.input_cut_bytes"] > 2 * exporting.attribute_chars


def test_the_resource_names_the_service_and_the_project_backends_file_spans_under(
    no_otel_env, monkeypatch
):
    def resource(service_name=None):
        return dict(telemetry.otel_resource(service_name).attributes)

    found = resource()
    assert found["service.name"] == "scroll" and found["openinference.project.name"] == "scroll"
    monkeypatch.setenv("OTEL_SERVICE_NAME", "support-bot")
    found = resource()
    assert (found["service.name"], found["openinference.project.name"]) == ("support-bot",) * 2
    monkeypatch.setenv(
        "OTEL_RESOURCE_ATTRIBUTES",
        "openinference.project.name=from-attributes,deployment.environment.name=staging",
    )
    found = resource()
    assert found["openinference.project.name"] == "from-attributes"
    assert found["deployment.environment.name"] == "staging"  # Langfuse's environment
    monkeypatch.setenv("SCROLL_TRACE_PROJECT", "scroll-prod")
    assert resource()["openinference.project.name"] == "scroll-prod"
    assert resource("given")["service.name"] == "given"
