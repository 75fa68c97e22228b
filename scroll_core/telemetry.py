"""Tracing and metrics: the one module that imports OpenTelemetry.

Everything else writes ``with span("scroll.expand", seq_lo=3, seq_hi=9):``. Until
``configure`` runs, ``span`` hands back a shared no-op and costs a function call, so the core
can be instrumented everywhere without a tracing dependency at run time.

Naming: span names follow the GenAI semantic conventions where one fits (``chat {model}``,
``execute_tool {tool}``, ``search_memory``) and ``scroll.*`` otherwise. Keyword attributes
without a dot are written under ``scroll.`` (``seq_lo=3`` becomes ``scroll.seq_lo``); dotted
names go in the ``attributes`` mapping as they are. ``session=`` sets
``gen_ai.conversation.id`` and every span opened inside inherits it, so a sink can route a
child span (an ``ms.expand`` inside a cell) to its session without looking up its parent.

``configure`` sets up one TracerProvider and one MeterProvider:

* spans go to the ``SpanSink`` objects given (the console persists them and pushes them to
  Channels groups) and to a bounded in-memory ``RingSink``, as plain ``SpanRecord`` values;
* the standard OTLP/HTTP exporters run whenever ``OTEL_EXPORTER_OTLP_ENDPOINT`` or the
  per-signal ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` / ``..._METRICS_ENDPOINT`` is set (and
  ``OTEL_TRACES_EXPORTER`` / ``OTEL_METRICS_EXPORTER`` is not ``none``); a backend that
  refuses metrics is told about in one warning, not one per export;
* the resource names the service and the project Arize Phoenix files spans under
  (``otel_resource``);
* ``chat`` spans carry the messages of their call only when
  ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`` (``chat_input``,
  ``chat_output``, built by ``genai_content``);
* counters, histograms and gauges (view tokens, evictions, folds, expands, retrievals per
  evicted block, kernel restarts, model token usage) are derived from finished spans, so
  instrumented code only writes spans.

Calling ``configure`` again replaces the processors and the meter provider rather than
stacking them; ``reset`` turns everything off again (tests use it between cases).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar, Token
from dataclasses import asdict, dataclass, field
from functools import wraps
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from opentelemetry import context as otel_context
from opentelemetry import trace as otel_trace

from . import genai_content
from .errors import ConfigError

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import MetricReader
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider

__all__ = [
    "DEFAULT_RING_SIZE",
    "RingSink",
    "SpanHandle",
    "SpanRecord",
    "SpanSink",
    "Telemetry",
    "chat_input",
    "chat_output",
    "chat_span",
    "configure",
    "current",
    "enabled",
    "force_flush",
    "memory_span",
    "otel_resource",
    "reset",
    "session_scope",
    "span",
    "state",
    "tool_span",
    "traced",
    "usage",
]

log = logging.getLogger("scroll.telemetry")

DEFAULT_RING_SIZE = 10_000
INSTRUMENTATION_NAME = "scroll"
# Long strings (a query, an SQL statement) are cut to this many characters in attributes.
MAX_ATTRIBUTE_CHARS = 1024
# Sequence attributes (hit seqs, block keys) keep at most this many items.
MAX_ATTRIBUTE_ITEMS = 64
# An exception event keeps at most this many characters of the message and of the stack trace,
# with a marker saying how many were cut. A cell makes a message as long as any argument it
# passes a host function (ms.days_between('x' * 3_900_000, ...) raised with the whole string
# in it), and every span is kept in memory, exported and stored by the console.
MAX_EXCEPTION_CHARS = 4096
# The SDK's own cap on any attribute value, for what does not pass through this module (span
# events of other instrumentation), raised to the message content cap when that is larger
# (genai_content.max_bytes, 64 KiB by default): OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT overrides it.
MAX_ANY_ATTRIBUTE_CHARS = 16_384

# GenAI semantic conventions (gen_ai.*), spelled out so no other module needs the package.
SESSION = "gen_ai.conversation.id"
OPERATION = "gen_ai.operation.name"
REQUEST_MODEL = "gen_ai.request.model"
RESPONSE_MODEL = "gen_ai.response.model"
PROVIDER = "gen_ai.provider.name"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
# Parts of INPUT_TOKENS (which counts them): read from the provider's prompt cache, written to it.
CACHE_READ_INPUT_TOKENS = "gen_ai.usage.cache_read.input_tokens"
CACHE_CREATION_INPUT_TOKENS = "gen_ai.usage.cache_creation.input_tokens"
FINISH_REASONS = "gen_ai.response.finish_reasons"
COMPACTED = "gen_ai.conversation.compacted"
TOOL_NAME = "gen_ai.tool.name"
TOOL_TYPE = "gen_ai.tool.type"
TOOL_CALL_ID = "gen_ai.tool.call.id"
AGENT_ID = "gen_ai.agent.id"
ERROR_TYPE = "error.type"

# Span names the metrics (and the console) key on.
SPAN_APPEND = "scroll.append"
SPAN_SEARCH = "scroll.search"
SPAN_SEARCH_MEMORY = "search_memory"
SPAN_EXPAND = "scroll.expand"
SPAN_SQL = "scroll.sql_query"
SPAN_COMPRESS = "scroll.compress"
SPAN_EVICT = "scroll.evict"
SPAN_FOLD = "scroll.fold"
SPAN_KERNEL_RESTART = "scroll.kernel.restart"

# The resource: the service, and the project Arize Phoenix files spans under.
SERVICE_NAME = "service.name"
PROJECT = "openinference.project.name"
PROJECT_VARIABLE = "SCROLL_TRACE_PROJECT"

_ENDPOINT = "OTEL_EXPORTER_OTLP_ENDPOINT"
_TRACES_ENDPOINT = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
_METRICS_ENDPOINT = "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"

_F = TypeVar("_F", bound=Callable[..., Any])


# ---------------------------------------------------------------------------- records and sinks
@dataclass(frozen=True)
class SpanRecord:
    """A finished span as plain data: what sinks receive and the console stores.

    Ids are lowercase hex (32 characters for a trace, 16 for a span); ``parent_id`` is None
    for a root span. ``status`` is ``"ok"``, ``"error"`` or ``"unset"``. ``session_id`` is
    the span's ``gen_ai.conversation.id`` (inherited from the enclosing span when not set).
    """

    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    start_ns: int
    end_ns: int
    duration_ms: float
    status: str
    status_message: str | None
    attributes: dict[str, Any]
    session_id: str | None
    kind: str = "internal"
    events: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@runtime_checkable
class SpanSink(Protocol):
    """Receives every finished span. Called on the thread that ended the span, so an
    implementation that does I/O should queue the record and return; an exception it raises
    is logged and never reaches the instrumented code."""

    def on_span(self, record: SpanRecord) -> None: ...


class RingSink:
    """The last ``size`` spans in memory: the embedded default and what tests inspect."""

    def __init__(self, size: int = DEFAULT_RING_SIZE) -> None:
        if size < 1:
            raise ConfigError(f"span ring size must be at least 1, got {size}")
        self.size = size
        self._spans: deque[SpanRecord] = deque(maxlen=size)
        self._lock = threading.Lock()
        self.received = 0

    def on_span(self, record: SpanRecord) -> None:
        with self._lock:
            self._spans.append(record)
            self.received += 1

    @property
    def overwritten(self) -> int:
        """How many spans fell out of the ring to make room for newer ones."""
        with self._lock:
            return self.received - len(self._spans)

    def records(
        self,
        name: str | None = None,
        *,
        session_id: str | None = None,
        trace_id: str | None = None,
        prefix: str | None = None,
    ) -> list[SpanRecord]:
        """Spans in the order they ended, optionally filtered."""
        with self._lock:
            spans = list(self._spans)
        return [
            s
            for s in spans
            if (name is None or s.name == name)
            and (prefix is None or s.name.startswith(prefix))
            and (session_id is None or s.session_id == session_id)
            and (trace_id is None or s.trace_id == trace_id)
        ]

    def children(self, parent: SpanRecord) -> list[SpanRecord]:
        return [s for s in self.records(trace_id=parent.trace_id) if s.parent_id == parent.span_id]

    def clear(self) -> None:
        with self._lock:
            self._spans.clear()
            self.received = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._spans)


# ---------------------------------------------------------------------------- the span helper
_SESSION: ContextVar[str | None] = ContextVar("scroll_session", default=None)


class SpanHandle:
    """What ``with span(...) as s`` yields: add attributes as the work reveals them."""

    __slots__ = ("_otel", "_session", "_session_token", "_token")

    recording = True

    def __init__(self, otel_span: Any, session: str | None = None) -> None:
        self._otel = otel_span
        self._session = session
        self._token: object | None = None
        self._session_token: Token[str | None] | None = None

    def set(self, **attrs: Any) -> None:
        """Set ``scroll.<key>`` attributes (keys with a dot are used as they are)."""
        clean = _clean_kwargs(attrs)
        if clean:
            self._otel.set_attributes(clean)  # one call: the span's lock is taken once

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        """Set attributes by their full names."""
        clean = {}
        for key, value in attributes.items():
            coerced = _coerce(value)
            if coerced is not None:
                clean[key] = coerced
        if clean:
            self._otel.set_attributes(clean)

    def set_content(self, attributes: Mapping[str, Any]) -> None:
        """Set attributes whole, without the 1,024-character cut of ``set_attributes``: for
        message content (``chat_input``/``chat_output``), capped already and JSON that a cut
        would break."""
        if attributes:
            self._otel.set_attributes(dict(attributes))

    def event(self, name: str, **attrs: Any) -> None:
        self._otel.add_event(name, _clean_kwargs(attrs))

    def error(self, message: str, error_type: str | None = None) -> None:
        """Mark the span failed without raising (a cell that timed out, a refused query)."""
        self._otel.set_status(
            otel_trace.Status(otel_trace.StatusCode.ERROR, message[:MAX_ATTRIBUTE_CHARS])
        )
        if error_type:
            self._otel.set_attribute(ERROR_TYPE, error_type)

    @property
    def trace_id(self) -> str:
        return format(self._otel.get_span_context().trace_id, "032x")

    @property
    def span_id(self) -> str:
        return format(self._otel.get_span_context().span_id, "016x")

    def __enter__(self) -> SpanHandle:
        self._token = otel_context.attach(otel_trace.set_span_in_context(self._otel))
        if self._session is not None:
            self._session_token = _SESSION.set(self._session)
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        try:
            if exc is not None and exc_type is not None:
                record_exception(self._otel, exc)
                self._otel.set_status(
                    otel_trace.Status(
                        otel_trace.StatusCode.ERROR,
                        f"{exc_type.__name__}: {_message_of(exc)}"[:MAX_ATTRIBUTE_CHARS],
                    )
                )
                self._otel.set_attribute(ERROR_TYPE, exc_type.__name__)
        finally:
            if self._session_token is not None:
                _SESSION.reset(self._session_token)
                self._session_token = None
            if self._token is not None:
                otel_context.detach(self._token)  # type: ignore[arg-type]
                self._token = None
            self._otel.end()


class _BorrowedSpan(SpanHandle):
    """A handle on a span someone else opened: it may add attributes but never ends it."""

    __slots__ = ()

    def __enter__(self) -> SpanHandle:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        return None


class _NoopSpan:
    """The shared stand-in used while telemetry is off; every method does nothing."""

    __slots__ = ()

    recording = False
    trace_id = ""
    span_id = ""

    def set(self, **attrs: Any) -> None:
        pass

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        pass

    def set_content(self, attributes: Mapping[str, Any]) -> None:
        pass

    def event(self, name: str, **attrs: Any) -> None:
        pass

    def error(self, message: str, error_type: str | None = None) -> None:
        pass

    def __enter__(self) -> _NoopSpan:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


_NOOP = _NoopSpan()
_ENABLED = False
_TRACER: otel_trace.Tracer | None = None


def enabled() -> bool:
    """Whether ``configure`` has run (spans are recorded)."""
    return _ENABLED


_QUIET: ContextVar[bool] = ContextVar("scroll_telemetry_quiet", default=False)


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """No spans in this block: what only reads (replaying a recorded session for the
    inspector, the replay lab, cost arithmetic) runs the same code as a live session, and
    must not add its compresses and evictions to that session's history."""
    token = _QUIET.set(True)
    try:
        yield
    finally:
        _QUIET.reset(token)


def span(
    name: str,
    attributes: Mapping[str, Any] | None = None,
    *,
    session: str | None = None,
    kind: str = "internal",
    **attrs: Any,
) -> SpanHandle | _NoopSpan:
    """A context manager for one span, a child of whatever span is current.

    ``attrs`` become ``scroll.<key>`` attributes (None values are left out); ``attributes``
    holds full dotted names (``gen_ai.*``). An exception leaving the block marks the span
    failed with ``error.type`` and is re-raised. Yields a ``SpanHandle`` (or a no-op with
    the same methods and ``recording = False`` while telemetry is off).
    """
    if not _ENABLED or _QUIET.get():
        return _NOOP
    clean = _clean_kwargs(attrs)
    if attributes:
        for key, value in attributes.items():
            coerced = _coerce(value)
            if coerced is not None:
                clean[key] = coerced
    if session is None:
        session = _SESSION.get()
        if session is not None and SESSION not in clean:
            clean[SESSION] = session
        session = None  # inherited: nothing to set for children
    else:
        clean[SESSION] = session
    tracer = _TRACER
    assert tracer is not None
    otel_span = tracer.start_span(name, attributes=clean, kind=_KINDS[kind])
    return SpanHandle(otel_span, session)


def traced(name: str | None = None, **attrs: Any) -> Callable[[_F], _F]:
    """Decorator form of ``span``: ``@traced("scroll.fold", tier=1)``."""

    def decorate(fn: _F) -> _F:
        span_name = name or f"scroll.{fn.__name__}"

        @wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not _ENABLED:
                return fn(*args, **kwargs)
            with span(span_name, **attrs):
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


class session_scope:
    """Attach ``session_id`` to every span opened inside, without opening one itself."""

    __slots__ = ("_session", "_token")

    def __init__(self, session_id: str | None) -> None:
        self._session = session_id
        self._token: Token[str | None] | None = None

    def __enter__(self) -> None:
        if self._session is not None:
            self._token = _SESSION.set(self._session)

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _SESSION.reset(self._token)
            self._token = None


def current() -> SpanHandle | _NoopSpan:
    """The innermost recording span on this thread, to add attributes from code that did
    not open it (a no-op when there is none). Entering or leaving it does not end it."""
    if not _ENABLED:
        return _NOOP
    otel_span = otel_trace.get_current_span()
    if not otel_span.is_recording():
        return _NOOP
    return _BorrowedSpan(otel_span)


# ---------------------------------------------------------------------------- GenAI helpers
def chat_span(
    model: str,
    *,
    session: str | None = None,
    provider: str | None = None,
    compacted: bool | None = None,
    **attrs: Any,
) -> SpanHandle | _NoopSpan:
    """``chat {model}`` for one model call; set ``usage(...)`` on it when the reply is in."""
    return span(
        f"chat {model}",
        {OPERATION: "chat", REQUEST_MODEL: model, PROVIDER: provider, COMPACTED: compacted},
        session=session,
        kind="client",
        **attrs,
    )


def tool_span(
    tool: str,
    *,
    tool_call_id: str | None = None,
    session: str | None = None,
    **attrs: Any,
) -> SpanHandle | _NoopSpan:
    """``execute_tool {tool}`` for one tool call (a kernel cell for the code tools)."""
    return span(
        f"execute_tool {tool}",
        {
            OPERATION: "execute_tool",
            TOOL_NAME: tool,
            TOOL_TYPE: "function",
            TOOL_CALL_ID: tool_call_id,
        },
        session=session,
        tool_call_id=tool_call_id,
        **attrs,
    )


def memory_span(
    operation: str = SPAN_SEARCH_MEMORY, *, session: str | None = None, **attrs: Any
) -> SpanHandle | _NoopSpan:
    """A memory operation named after itself (``search_memory``)."""
    return span(operation, {OPERATION: operation}, session=session, **attrs)


def usage(
    input_tokens: int | None = None,
    output_tokens: int | None = None,
    *,
    response_model: str | None = None,
    finish_reasons: Sequence[str] | None = None,
    cache_read_input_tokens: int | None = None,
    cache_creation_input_tokens: int | None = None,
) -> dict[str, Any]:
    """GenAI usage attributes for ``SpanHandle.set_attributes`` (the cache counts are parts
    of ``input_tokens``, left out when the provider did not report them)."""
    found = {
        INPUT_TOKENS: input_tokens,
        OUTPUT_TOKENS: output_tokens,
        CACHE_READ_INPUT_TOKENS: cache_read_input_tokens,
        CACHE_CREATION_INPUT_TOKENS: cache_creation_input_tokens,
        RESPONSE_MODEL: response_model,
        FINISH_REASONS: list(finish_reasons) if finish_reasons is not None else None,
    }
    return {k: v for k, v in found.items() if v is not None}


def chat_input(model: str, messages: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What a ``chat`` span says of the messages sent, for ``SpanHandle.set_content``: the
    GenAI conventions' ``gen_ai.system_instructions`` and ``gen_ai.input.messages`` with
    OpenInference's mirrors (``scroll_core.genai_content``). Empty unless telemetry is on and
    ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``."""
    if not _ENABLED or not genai_content.capture_enabled():
        return {}
    return genai_content.input_attributes(model, messages, _content_limit())


def chat_output(
    reply: Mapping[str, Any],
    finish_reason: str,
    input_tokens: int | None = None,
    output_tokens: int | None = None,
) -> dict[str, Any]:
    """``chat_input``'s counterpart for the reply (an assistant message in the Chat
    Completions shape): ``gen_ai.output.messages``, its mirrors and OpenInference's token
    counts. Empty while content capture is off."""
    if not _ENABLED or not genai_content.capture_enabled():
        return {}
    return genai_content.output_attributes(
        reply,
        finish_reason,
        _content_limit(),
        input_tokens=input_tokens,
        output_tokens=output_tokens,
    )


def _content_limit() -> int:
    """Each content attribute's byte cap: the configured one, within the SDK's attribute
    length limit (fixed when the provider was made) so the SDK never cuts the JSON. Bytes of
    UTF-8 are never fewer than characters, so a byte cap under the limit fits it."""
    cap = genai_content.max_bytes()
    state = _STATE
    limit = state.attribute_chars if state is not None else None
    return cap if limit is None else min(cap, limit)


# ---------------------------------------------------------------------------- attribute values
def cut(text: str, limit: int) -> str:
    """``text`` in at most about ``limit`` characters: its head and tail around a marker that
    says how many characters were cut (the start and the end of a stack trace are the parts
    that say what happened)."""
    if len(text) <= limit:
        return text
    head = limit // 2
    tail = limit - head
    return f"{text[:head]} …[{len(text) - limit:,} characters cut]… {text[-tail:]}"


def _message_of(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # an exception whose __str__ raises still leaves its event and status
        return f"<unprintable {type(exc).__name__}>"


def record_exception(otel_span: Any, exc: BaseException) -> None:
    """The OpenTelemetry ``exception`` event (type, message, stack trace), each value cut to
    ``MAX_EXCEPTION_CHARS``: the SDK's ``record_exception`` keeps them whole."""
    message = _message_of(exc)
    module, qualname = type(exc).__module__, type(exc).__qualname__
    try:
        stacktrace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    except Exception:
        stacktrace = f"{qualname}: {message}"
    otel_span.add_event(
        "exception",
        {
            "exception.type": f"{module}.{qualname}" if module != "builtins" else qualname,
            "exception.message": cut(message, MAX_EXCEPTION_CHARS),
            "exception.stacktrace": cut(stacktrace, MAX_EXCEPTION_CHARS),
            "exception.escaped": "False",
        },
    )


def _coerce(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        return value[:MAX_ATTRIBUTE_CHARS]
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [v for v in list(value)[:MAX_ATTRIBUTE_ITEMS] if v is not None]
        if not items:
            return None
        if all(isinstance(v, bool) for v in items):
            return items
        if all(isinstance(v, int) and not isinstance(v, bool) for v in items):
            return items
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in items):
            return [float(v) for v in items]
        return [str(v)[:MAX_ATTRIBUTE_CHARS] for v in items]
    return str(value)[:MAX_ATTRIBUTE_CHARS]


def _clean_kwargs(attrs: Mapping[str, Any]) -> dict[str, Any]:
    clean: dict[str, Any] = {}
    for key, value in attrs.items():
        coerced = _coerce(value)
        if coerced is not None:
            clean[key if "." in key else f"scroll.{key}"] = coerced
    return clean


def _kinds() -> dict[str, otel_trace.SpanKind]:
    k = otel_trace.SpanKind
    return {
        "internal": k.INTERNAL,
        "client": k.CLIENT,
        "server": k.SERVER,
        "producer": k.PRODUCER,
        "consumer": k.CONSUMER,
    }


_KINDS = _kinds()


# ---------------------------------------------------------------------------- configuration
@dataclass
class Telemetry:
    """What ``configure`` set up; ``ring`` is None when it was turned off."""

    tracer_provider: TracerProvider
    meter_provider: MeterProvider
    ring: RingSink | None
    sinks: tuple[SpanSink, ...]
    otlp_traces: bool
    otlp_metrics: bool
    # The SDK's cap on any attribute value, in characters (None: none that Scroll knows of).
    attribute_chars: int | None = None

    def force_flush(self, timeout_ms: int = 10_000) -> bool:
        traced_ok = self.tracer_provider.force_flush(timeout_ms)
        metered_ok = self.meter_provider.force_flush(timeout_ms)
        return bool(traced_ok and metered_ok)


_LOCK = threading.RLock()
_STATE: Telemetry | None = None
_PROVIDER: TracerProvider | None = None
_ATTRIBUTE_CHARS: int | None = None  # the provider's attribute length limit
_SWITCH: Any = None  # _SwitchProcessor, built lazily with the SDK
_ATEXIT = False


def configure(
    *,
    service_name: str | None = None,
    sinks: Sequence[SpanSink] = (),
    ring_size: int | None = DEFAULT_RING_SIZE,
    otlp: bool | None = None,
    metric_readers: Sequence[MetricReader] = (),
    metric_interval_ms: int | None = None,
) -> Telemetry:
    """Turn telemetry on (or re-configure it) and return what was set up.

    ``sinks`` receive every finished span as a ``SpanRecord``; ``ring_size`` keeps that many
    in a ``RingSink`` (None: no ring). ``otlp`` None exports over OTLP/HTTP exactly when the
    standard endpoint variables are set; True or False forces it. ``metric_readers`` are
    added to the meter provider (tests pass an in-memory reader). ``OTEL_SDK_DISABLED=true``
    leaves spans off whatever else is given. ``service_name`` defaults to
    ``OTEL_SERVICE_NAME`` or ``scroll``; it is fixed by the first call in a process.
    """
    global _STATE, _ENABLED, _TRACER, _ATEXIT
    for sink in sinks:
        if not callable(getattr(sink, "on_span", None)):
            raise ConfigError(f"span sink {sink!r} has no on_span(record) method")
    if metric_interval_ms is not None and metric_interval_ms < 1:
        raise ConfigError("metric_interval_ms must be at least 1")
    protocol = os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    if protocol not in ("http/protobuf", ""):
        raise ConfigError(
            f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r} is not supported: Scroll exports "
            "OTLP over HTTP with protobuf (http/protobuf); point it at the collector's "
            "HTTP port (4318)"
        )
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    with _LOCK:
        _shutdown_state()
        ring = RingSink(ring_size) if ring_size is not None else None
        all_sinks = (*sinks, ring) if ring is not None else tuple(sinks)
        provider, switch = _tracer_provider(service_name)
        resource = provider.resource

        otlp_traces = _wanted(otlp, _TRACES_ENDPOINT, "OTEL_TRACES_EXPORTER")
        otlp_metrics = _wanted(otlp, _METRICS_ENDPOINT, "OTEL_METRICS_EXPORTER")
        processors: list[Any] = [_SinkProcessor(all_sinks)] if all_sinks else []
        if otlp_traces:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            processors.append(BatchSpanProcessor(OTLPSpanExporter()))
        readers: list[MetricReader] = list(metric_readers)
        if otlp_metrics:
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
                OTLPMetricExporter,
            )

            interval = metric_interval_ms or _env_int("OTEL_METRIC_EXPORT_INTERVAL", 60_000)
            exporter = _refusal_guard(OTLPMetricExporter(), _signal_endpoint("metrics"))
            readers.append(PeriodicExportingMetricReader(exporter, export_interval_millis=interval))
        meter_provider = MeterProvider(
            resource=resource, metric_readers=readers, shutdown_on_exit=False
        )
        if readers:  # metrics nothing reads are not worth a measurement per span
            processors.append(_SpanMetrics(meter_provider))
        switch.replace(processors)

        state = Telemetry(
            tracer_provider=provider,
            meter_provider=meter_provider,
            ring=ring,
            sinks=all_sinks,
            otlp_traces=otlp_traces,
            otlp_metrics=otlp_metrics,
            attribute_chars=_ATTRIBUTE_CHARS,
        )
        _STATE = state
        _TRACER = provider.get_tracer(INSTRUMENTATION_NAME)
        _ENABLED = os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() != "true"
        if not _ATEXIT:
            atexit.register(reset)
            _ATEXIT = True
        return state


def reset() -> None:
    """Flush and stop every processor and reader; spans become no-ops again."""
    global _ENABLED, _STATE
    with _LOCK:
        _ENABLED = False
        _shutdown_state()
        _STATE = None


def state() -> Telemetry | None:
    """The current configuration, or None while telemetry is off."""
    return _STATE


def force_flush(timeout_ms: int = 10_000) -> bool:
    """Push every finished span and the current metrics out now (tests, shutdown)."""
    current_state = _STATE
    return True if current_state is None else current_state.force_flush(timeout_ms)


def _shutdown_state() -> None:
    old = _STATE
    if old is None:
        return
    if _SWITCH is not None:
        _SWITCH.replace([])
    try:
        old.meter_provider.shutdown()
    except Exception:  # pragma: no cover - a failing exporter must not stop a reconfigure
        log.exception("telemetry: meter provider shutdown failed")


def _wanted(otlp: bool | None, signal_variable: str, exporter_variable: str) -> bool:
    """Whether a signal goes out over OTLP: when its endpoint or the base one is set, unless
    ``OTEL_TRACES_EXPORTER``/``OTEL_METRICS_EXPORTER`` names no ``otlp`` (``none`` turns the
    signal off, as the SDK's own variables mean; Scroll exports nothing else)."""
    if otlp is not None:
        return otlp
    names = {n.strip().lower() for n in os.environ.get(exporter_variable, "").split(",")} - {""}
    if names - {"otlp", "none"}:
        log.warning(
            "telemetry: %s=%s: Scroll exports only otlp (or none); the others are ignored",
            exporter_variable,
            os.environ[exporter_variable],
        )
    if names and "otlp" not in names:
        return False
    return bool(
        os.environ.get(_ENDPOINT, "").strip() or os.environ.get(signal_variable, "").strip()
    )


def _signal_endpoint(signal: str) -> str:
    """Where the OTLP exporter of ``signal`` sends, by the SDK's rule (for messages)."""
    own = os.environ.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT", "").strip()
    if own:
        return own
    base = os.environ.get(_ENDPOINT, "").strip() or "http://localhost:4318"
    return f"{base.rstrip('/')}/v1/{signal}"


def _env_int(name: str, default: int, unit: str = "milliseconds") -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a whole number of {unit}") from None
    if value < 1:
        raise ConfigError(f"{name} must be at least 1")
    return value


def _tracer_provider(service_name: str | None) -> tuple[TracerProvider, Any]:
    """The process's one SDK TracerProvider, with our switchable processor attached once.

    OpenTelemetry lets the global provider be set only once per process, so instead of a new
    provider per ``configure`` there is one, and ``configure`` swaps what its processor feeds.
    If something else already installed an SDK provider globally, that one is used."""
    global _PROVIDER, _SWITCH, _ATTRIBUTE_CHARS
    from opentelemetry.sdk.trace import SpanLimits, TracerProvider

    if _PROVIDER is not None:
        return _PROVIDER, _SWITCH
    switch = _make_switch()
    existing = otel_trace.get_tracer_provider()
    from_env = _env_int("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", 0, unit="characters") or None
    if isinstance(existing, TracerProvider):
        provider, _ATTRIBUTE_CHARS = existing, from_env
    else:
        # Room for message content whole (its own cap keeps it valid JSON), the SDK's cut
        # for any other value; OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT decides both when set.
        _ATTRIBUTE_CHARS = from_env or max(MAX_ANY_ATTRIBUTE_CHARS, genai_content.max_bytes())
        provider = TracerProvider(
            resource=otel_resource(service_name),
            span_limits=SpanLimits(max_attribute_length=None if from_env else _ATTRIBUTE_CHARS),
            shutdown_on_exit=False,
        )
        if isinstance(existing, otel_trace.ProxyTracerProvider):
            otel_trace.set_tracer_provider(provider)
    provider.add_span_processor(switch)
    _PROVIDER, _SWITCH = provider, switch
    return provider, switch


def otel_resource(service_name: str | None = None) -> Any:
    """The resource every span and metric carries (an SDK ``Resource``).

    ``service.name``: ``service_name``, else ``OTEL_SERVICE_NAME`` (or ``service.name`` in
    ``OTEL_RESOURCE_ATTRIBUTES``), else ``scroll``. ``openinference.project.name``, the
    project Arize Phoenix files the spans under: ``SCROLL_TRACE_PROJECT``, else the one in
    ``OTEL_RESOURCE_ATTRIBUTES``, else the service name. Langfuse picks its project by the
    API keys in ``OTEL_EXPORTER_OTLP_HEADERS`` and its environment by
    ``deployment.environment.name`` (``OTEL_RESOURCE_ATTRIBUTES``), which pass through."""
    from opentelemetry.sdk.resources import Resource

    found = Resource.create()  # the SDK's own attributes and the two variables
    name = service_name or str(found.attributes.get(SERVICE_NAME, ""))
    if not name or name.startswith("unknown_service"):
        name = INSTRUMENTATION_NAME
    project = (
        os.environ.get(PROJECT_VARIABLE, "").strip()
        or str(found.attributes.get(PROJECT, ""))
        or name
    )
    return found.merge(Resource({SERVICE_NAME: name, PROJECT: project}))


# ---------------------------------------------------------------------------- processors
def _make_switch() -> Any:
    from opentelemetry.sdk.trace import SpanProcessor

    class _SwitchProcessor(SpanProcessor):
        """Forwards to the processors of the current configuration; swapped atomically."""

        def __init__(self) -> None:
            self._processors: tuple[Any, ...] = ()

        def replace(self, processors: Sequence[Any]) -> None:
            old, self._processors = self._processors, tuple(processors)
            for processor in old:
                try:
                    processor.shutdown()
                except Exception:  # pragma: no cover - exporter failure at shutdown
                    log.exception("telemetry: span processor shutdown failed")

        def on_start(self, span: Any, parent_context: Any = None) -> None:
            for processor in self._processors:
                processor.on_start(span, parent_context=parent_context)

        def on_end(self, span: ReadableSpan) -> None:
            for processor in self._processors:
                processor.on_end(span)

        def shutdown(self) -> None:
            self.replace([])

        def force_flush(self, timeout_millis: int = 30_000) -> bool:
            deadline = time.monotonic() + timeout_millis / 1000
            ok = True
            for processor in self._processors:
                left = max(0, int((deadline - time.monotonic()) * 1000))
                ok = bool(processor.force_flush(left)) and ok
            return ok

    return _SwitchProcessor()


class _HeldRecords(logging.Filter):
    """Holds back what a logger logs on one thread while ``holding``, for the caller to read."""

    def __init__(self) -> None:
        super().__init__()
        self._local = threading.local()

    def filter(self, record: logging.LogRecord) -> bool:
        held = getattr(self._local, "held", None)
        if held is None:
            return True
        held.append(record)
        return False

    @contextlib.contextmanager
    def holding(self) -> Iterator[list[logging.LogRecord]]:
        held: list[logging.LogRecord] = []
        self._local.held = held
        try:
            yield held
        finally:
            self._local.held = None


def _refused(held: Sequence[logging.LogRecord]) -> int | None:
    """The HTTP status of a refusal among an exporter's records: a 4xx that trying again will
    not change (not 408, 413 or 429), found among the numbers its messages were made with."""
    for record in held:
        args = record.args if isinstance(record.args, tuple) else ()
        for arg in args:
            if isinstance(arg, int) and 400 <= arg < 500 and arg not in (408, 413, 429):
                return arg
    return None


def _refusal_guard(inner: Any, endpoint: str) -> Any:
    """``inner`` (the OTLP metric exporter), told about once when its backend fails.

    The SDK logs an error for every failed export: Arize Phoenix answers ``/v1/metrics`` with
    405, so the base endpoint alone meant one error a minute (45 in a session). Here the
    exporter's own records are held back during each export: a refusal (a lasting 4xx) is
    one warning that says what to set, and no metrics are sent again in this process; other
    failures are one warning until an export works again."""
    from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult

    class _MetricRefusalGuard(MetricExporter):
        def __init__(self) -> None:
            super().__init__(
                preferred_temporality=inner._preferred_temporality,
                preferred_aggregation=inner._preferred_aggregation,
            )
            self.refused: int | None = None
            self.failing = False
            self._held = _HeldRecords()
            self._logger = logging.getLogger(type(inner).__module__)
            self._logger.addFilter(self._held)

        def export(
            self, metrics_data: Any, timeout_millis: float = 10_000, **kwargs: Any
        ) -> MetricExportResult:
            if self.refused is not None:
                return MetricExportResult.FAILURE
            with self._held.holding() as held:
                result = inner.export(metrics_data, timeout_millis=timeout_millis, **kwargs)
            if result == MetricExportResult.SUCCESS:
                if self.failing:
                    log.info("telemetry: metrics reach %s again", endpoint)
                self.failing = False
                return result
            said = "; ".join(r.getMessage() for r in held) or "no reason given"
            self.refused = _refused(held)
            if self.refused is not None:
                log.warning(
                    "telemetry: %s refuses OTLP metrics (HTTP %s: %s); Scroll sends it no "
                    "more metrics until it restarts, and spans go on as before. Set "
                    "OTEL_METRICS_EXPORTER=none (or only OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) "
                    "for a backend that takes only traces, such as Arize Phoenix, or "
                    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT for a collector that takes metrics",
                    endpoint,
                    self.refused,
                    said,
                )
            elif not self.failing:
                self.failing = True
                log.warning(
                    "telemetry: exporting metrics to %s failed (%s); trying again each "
                    "interval without saying so until it works",
                    endpoint,
                    said,
                )
            return result

        def force_flush(self, timeout_millis: float = 10_000) -> bool:
            return bool(inner.force_flush(timeout_millis=timeout_millis))

        def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
            self._logger.removeFilter(self._held)
            inner.shutdown(timeout_millis=timeout_millis, **kwargs)

    return _MetricRefusalGuard()


class _SinkProcessor:
    """Turns each finished span into a ``SpanRecord`` for the sinks."""

    def __init__(self, sinks: Sequence[SpanSink]) -> None:
        self.sinks = tuple(sinks)

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        record = to_record(span)
        for sink in self.sinks:
            try:
                sink.on_span(record)
            except Exception:
                log.exception("telemetry: span sink %r failed on %s", sink, record.name)

    def shutdown(self) -> None:
        for sink in self.sinks:
            close = getattr(sink, "close", None)
            if callable(close):
                try:
                    close()
                except Exception:  # pragma: no cover
                    log.exception("telemetry: closing span sink %r failed", sink)

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


def to_record(span: ReadableSpan) -> SpanRecord:
    """A finished SDK span as a ``SpanRecord``."""
    ctx = span.get_span_context()
    assert ctx is not None
    parent = span.parent
    start = span.start_time or 0
    end = span.end_time or start
    status = span.status
    code = status.status_code.name.lower() if status is not None else "unset"
    attributes = dict(span.attributes or {})
    for key, value in attributes.items():
        if isinstance(value, tuple):
            attributes[key] = list(value)
    session = attributes.get(SESSION)
    return SpanRecord(
        trace_id=format(ctx.trace_id, "032x"),
        span_id=format(ctx.span_id, "016x"),
        parent_id=format(parent.span_id, "016x") if parent is not None else None,
        name=span.name,
        start_ns=start,
        end_ns=end,
        duration_ms=(end - start) / 1e6,
        status=code,
        status_message=(status.description if status is not None else None) or None,
        attributes=attributes,
        session_id=str(session) if session is not None else None,
        kind=span.kind.name.lower(),
        events=[
            {"name": e.name, "timestamp_ns": e.timestamp, "attributes": dict(e.attributes or {})}
            for e in span.events
        ],
    )


class _SpanMetrics:
    """Metrics derived from finished spans, so instrumented code writes spans only.

    scroll.view.tokens (gauge)        tokens of the view after a compress
    scroll.evictions                  one per scroll.evict span
    scroll.folds                      scroll.fold spans: their ``scroll.folds`` or one each
    scroll.expands                    one per scroll.expand span
    scroll.block.retrievals           one per evicted block an expand hit (scroll.block)
    scroll.kernel.restarts            one per scroll.kernel.restart span
    scroll.cell.duration (ms)         execute_tool spans, by tool and status
    gen_ai.client.token.usage         chat spans, by token type (GenAI conventions)
    gen_ai.client.operation.duration  chat spans, in seconds
    """

    def __init__(self, provider: MeterProvider) -> None:
        meter = provider.get_meter(INSTRUMENTATION_NAME)
        self.view_tokens = meter.create_gauge(
            "scroll.view.tokens", unit="{token}", description="Tokens in the working view"
        )
        self.view_trigger = meter.create_gauge(
            "scroll.view.trigger_tokens", unit="{token}", description="Compress trigger"
        )
        self.evictions = meter.create_counter(
            "scroll.evictions", unit="{eviction}", description="Spans evicted from the view"
        )
        self.evicted_tokens = meter.create_counter(
            "scroll.evicted.tokens", unit="{token}", description="Tokens evicted from the view"
        )
        self.folds = meter.create_counter(
            "scroll.folds", unit="{fold}", description="Tool results folded to recovery pointers"
        )
        self.expands = meter.create_counter(
            "scroll.expands", unit="{expand}", description="ms.expand calls"
        )
        self.retrievals = meter.create_counter(
            "scroll.block.retrievals",
            unit="{retrieval}",
            description="Expands that hit an evicted block, per block",
        )
        self.restarts = meter.create_counter(
            "scroll.kernel.restarts", unit="{restart}", description="Kernel restarts"
        )
        self.cell_duration = meter.create_histogram(
            "scroll.cell.duration", unit="ms", description="Kernel cell wall time"
        )
        self.token_usage = meter.create_histogram(
            "gen_ai.client.token.usage", unit="{token}", description="Tokens per model call"
        )
        self.chat_duration = meter.create_histogram(
            "gen_ai.client.operation.duration", unit="s", description="Model call duration"
        )

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        name = span.name
        attrs = span.attributes or {}
        session = attrs.get(SESSION)
        base = {SESSION: session} if session is not None else {}
        if name == SPAN_EXPAND:
            self.expands.add(1, base)
            blocks = attrs.get("scroll.blocks")
            if isinstance(blocks, (list, tuple)):
                for block in blocks:
                    self.retrievals.add(1, {**base, "scroll.block": str(block)})
        elif name == SPAN_EVICT:
            self.evictions.add(1, _with_tier(base, attrs))
            tokens = attrs.get("scroll.tokens")
            if isinstance(tokens, int):
                self.evicted_tokens.add(tokens, base)
        elif name == SPAN_FOLD:
            # One span may cover a batch of folds (``folds=n``); otherwise it is one fold.
            folds = attrs.get("scroll.folds")
            count = folds if isinstance(folds, int) and not isinstance(folds, bool) else 1
            if count > 0:
                self.folds.add(count, _with_tier(base, attrs))
        elif name == SPAN_COMPRESS:
            after = attrs.get("scroll.tokens_after")
            if isinstance(after, int):
                self.view_tokens.set(after, base)
            trigger = attrs.get("scroll.trigger_tokens")
            if isinstance(trigger, int):
                self.view_trigger.set(trigger, base)
        elif name == SPAN_KERNEL_RESTART:
            tier = attrs.get("scroll.kernel_tier")
            self.restarts.add(1, {"scroll.kernel_tier": tier} if tier is not None else {})
        elif attrs.get(OPERATION) == "execute_tool":
            duration = ((span.end_time or 0) - (span.start_time or 0)) / 1e6
            self.cell_duration.record(
                duration,
                {
                    TOOL_NAME: str(attrs.get(TOOL_NAME, "")),
                    "scroll.status": str(attrs.get("scroll.status", "")),
                },
            )
        elif attrs.get(OPERATION) == "chat":
            model = {OPERATION: "chat", REQUEST_MODEL: str(attrs.get(REQUEST_MODEL, ""))}
            for key, token_type in ((INPUT_TOKENS, "input"), (OUTPUT_TOKENS, "output")):
                value = attrs.get(key)
                if isinstance(value, int):
                    self.token_usage.record(value, {**model, "gen_ai.token.type": token_type})
            seconds = ((span.end_time or 0) - (span.start_time or 0)) / 1e9
            self.chat_duration.record(seconds, model)

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


def _with_tier(base: dict[str, Any], attrs: Mapping[str, Any]) -> dict[str, Any]:
    tier = attrs.get("scroll.tier")
    return {**base, "scroll.tier": tier} if tier is not None else base
