"""The console's span sink: persist finished spans, evaluate the alert rules, push both to
the Channels groups of ``dashboard.groups``.

``on_span`` runs on whatever thread ended the span (often an agent's), so it only puts the
record on a bounded queue and returns: it never blocks and never raises. A full queue drops
the span and counts it in ``dropped``. One worker thread drains the queue in batches, writes
``SpanRecord`` rows (oldest pruned past ``SCROLL_SPAN_RETENTION``), runs the alert engine and
sends ``span.finished`` / ``alert.changed`` messages (one hop per batch, see below).
Every failure there is logged and counted in ``errors``; the agent never sees it.

Sending from a worker thread: the in-memory channel layer keeps ``asyncio.Queue`` objects that
belong to the server's event loop, and putting on them from another thread (which is what
``async_to_sync`` does: it runs the coroutine on a loop of its own) neither is thread-safe nor
reliably wakes the consumer waiting on the queue. So the ASGI application records the
server's running loop the first time it is called (``remember_server_loop``, from
``dashboard.asgi`` and the consumers' ``connect``), and ``send_groups`` schedules the sends
on that loop with ``asyncio.run_coroutine_threadsafe``. Without a known, running server loop
(a management command, a test without a server) it falls back to ``async_to_sync``.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Iterable, Sequence
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import IntegrityError, close_old_connections, connection, transaction

from dashboard import groups
from dashboard.alerts import AlertEngine
from dashboard.models import Alert, RunRecord, SpanRecord

__all__ = [
    "ConsoleSpanSink",
    "get_sink",
    "push_alert",
    "push_session",
    "remember_server_loop",
    "send_group",
    "send_groups",
    "server_loop",
    "span_retention",
]

log = logging.getLogger("dashboard.spans")

DEFAULT_RETENTION = 50_000
DEFAULT_QUEUE_SIZE = 10_000
BATCH = 200
# The worker waits this long after a span for more before processing the batch: a burst
# then goes out as one message per group (and one WebSocket frame per page) instead of one
# per span, which is what keeps a busy server's event loop from falling behind.
DEFAULT_LINGER_S = 0.05
# Pruning deletes in one statement; checking after every batch would be wasted work.
PRUNE_EVERY = 500


def span_retention() -> int:
    """How many spans are kept (settings.SCROLL_SPAN_RETENTION, default 50,000)."""
    return max(1, int(getattr(settings, "SCROLL_SPAN_RETENTION", DEFAULT_RETENTION)))


# How long a worker waits for the server's loop to take one batch of messages.
SEND_TIMEOUT_S = 10.0

_server_loop: asyncio.AbstractEventLoop | None = None


def remember_server_loop(loop: asyncio.AbstractEventLoop | None = None) -> None:
    """Record the ASGI server's event loop (call from a coroutine the server runs)."""
    global _server_loop
    if loop is None:
        loop = asyncio.get_running_loop()
    if _server_loop is not loop:
        _server_loop = loop


def server_loop() -> asyncio.AbstractEventLoop | None:
    """The recorded server loop while it runs; None when unknown, stopped or closed."""
    loop = _server_loop
    if loop is None or loop.is_closed() or not loop.is_running():
        return None
    return loop


async def _send_all(layer: Any, messages: Sequence[tuple[str, dict[str, Any]]]) -> int:
    failed = 0
    for group, message in messages:
        try:
            await layer.group_send(group, message)
        except Exception:
            failed += 1
            log.exception("console: sending %s to %s failed", message.get("type"), group)
    return failed


def send_groups(messages: Sequence[tuple[str, dict[str, Any]]]) -> bool:
    """``group_send`` each ``(group, message)`` in order, from synchronous code.

    On the server's loop when one is known (thread-safe for the in-memory layer), else
    through ``async_to_sync``. False (logged) when any send failed.
    """
    layer = get_channel_layer()
    if layer is None or not messages:
        return layer is not None
    loop = server_loop()
    try:
        if loop is None:
            failed = async_to_sync(_send_all)(layer, messages)
        else:
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is loop:
                # Called from the server's own thread: schedule, never block the loop.
                loop.create_task(_send_all(layer, messages))
                return True
            future = asyncio.run_coroutine_threadsafe(_send_all(layer, messages), loop)
            failed = future.result(SEND_TIMEOUT_S)
    except Exception:
        log.exception("console: sending %d messages failed", len(messages))
        return False
    return failed == 0


def send_group(group: str, message: dict[str, Any]) -> bool:
    """``group_send`` from synchronous code; False (logged) when the layer refuses it."""
    return send_groups([(group, message)])


def spans_message(spans: list[dict[str, Any]]) -> dict[str, Any]:
    """``span.finished`` for one span, ``spans.finished`` (oldest first) for several."""
    if len(spans) == 1:
        return {"type": "span.finished", "span": spans[0]}
    return {"type": "spans.finished", "spans": spans}


def push_alert(alert: Alert) -> None:
    send_group(groups.ALERTS, {"type": "alert.changed", "alert": alert.to_dict()})


def push_session(run: RunRecord) -> None:
    message = {"type": "session.changed", "session_id": run.session_id, "summary": run.summary()}
    send_groups([(groups.SPANS, message), (groups.session_group(run.session_id), message)])


def push_profile_runs(profile_id: int) -> None:
    """A profile was edited: each active run on it re-sends its session (the timeline shows
    the change as soon as it is saved, not at the run's next step)."""
    active = RunRecord.objects.select_related("profile").filter(
        profile_id=profile_id, status__in=RunRecord.ACTIVE
    )
    for run in active:
        push_session(run)


class ConsoleSpanSink:
    """A ``scroll_core.telemetry.SpanSink``; see the module docstring."""

    def __init__(
        self,
        *,
        maxsize: int = DEFAULT_QUEUE_SIZE,
        start: bool = True,
        linger_s: float = DEFAULT_LINGER_S,
    ) -> None:
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=maxsize)
        self.linger_s = linger_s
        self.engine = AlertEngine()
        self.received = 0
        self.dropped = 0
        self.stored = 0
        self.errors = 0
        self._since_prune = 0
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        if start:
            self.start()

    # -- the agent side ------------------------------------------------------------------
    def on_span(self, record: Any) -> None:
        self.received += 1
        if self._closed.is_set():
            self.dropped += 1
            return
        try:
            self._queue.put_nowait(record)
        except queue.Full:
            self.dropped += 1

    # -- the worker ----------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._work, name="scroll-span-sink", daemon=True)
            self._thread.start()

    def _work(self) -> None:
        try:
            while not self._closed.is_set():
                try:
                    first = self._queue.get(timeout=0.5)
                except queue.Empty:
                    continue
                # Linger a moment for company: one message per group per batch, not per span.
                # Asleep, not woken by each span that arrives meanwhile: every wake-up takes
                # the interpreter from the request that is producing those spans.
                batch = [first]
                if self.linger_s > 0:
                    self._closed.wait(self.linger_s)
                while len(batch) < BATCH:
                    try:
                        batch.append(self._queue.get_nowait())
                    except queue.Empty:
                        break
                try:
                    close_old_connections()
                    self.process(batch)
                except Exception:
                    self.errors += 1
                    log.exception("console: span batch of %d failed", len(batch))
                finally:
                    for _ in batch:
                        self._queue.task_done()
        finally:
            connection.close()

    def process(self, records: Iterable[Any]) -> list[SpanRecord]:
        """Persist, evaluate and push one batch (the worker calls this; tests may too)."""
        rows = self._store([SpanRecord.from_core(r) for r in records if r is not None])
        by_group: dict[str, list[dict[str, Any]]] = {}
        alerts: list[tuple[str, dict[str, Any]]] = []
        for row in rows:
            span = row.to_dict()
            try:
                changed = self.engine.observe(span)
            except Exception:
                self.errors += 1
                log.exception("console: alert rules failed on %s", row.name)
                changed = []
            by_group.setdefault(groups.SPANS, []).append(span)
            if row.session_id:
                by_group.setdefault(groups.session_group(row.session_id), []).append(span)
            alerts.extend(
                (groups.ALERTS, {"type": "alert.changed", "alert": alert.to_dict()})
                for alert in changed
            )
        outbox = [(group, spans_message(spans)) for group, spans in by_group.items()] + alerts
        # The whole batch in one hop to the server's loop, in order.
        if not send_groups(outbox):
            self.errors += 1
        self._since_prune += len(rows)
        if self._since_prune >= PRUNE_EVERY:
            self._since_prune = 0
            self.prune()
        return rows

    def _store(self, rows: list[SpanRecord]) -> list[SpanRecord]:
        try:
            with transaction.atomic():
                stored = SpanRecord.objects.bulk_create(rows)
        except IntegrityError:
            # A span id seen before (a replayed export): store the others one by one.
            stored = []
            for row in rows:
                try:
                    with transaction.atomic():
                        row.save()
                    stored.append(row)
                except IntegrityError:
                    pass
        self.stored += len(stored)
        return stored

    def prune(self) -> int:
        """Delete the oldest spans beyond the retention; returns how many went."""
        keep = span_retention()
        newest = SpanRecord.objects.order_by("-id").values_list("id", flat=True).first()
        if newest is None:
            return 0
        deleted, _ = SpanRecord.objects.filter(id__lte=newest - keep).delete()
        return deleted

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every queued span is processed (tests, shutdown)."""
        done = threading.Event()

        def wait() -> None:
            self._queue.join()
            done.set()

        threading.Thread(target=wait, daemon=True).start()
        return done.wait(timeout)

    def stats(self) -> dict[str, int]:
        return {
            "received": self.received,
            "stored": self.stored,
            "dropped": self.dropped,
            "errors": self.errors,
            "queued": self._queue.qsize(),
        }

    def close(self) -> None:
        self._closed.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=2.0)


_sink_lock = threading.Lock()
_sink: ConsoleSpanSink | None = None


def get_sink() -> ConsoleSpanSink | None:
    """The sink ``dashboard.apps`` configured at start-up (None before, or in tests)."""
    return _sink


def install_sink() -> ConsoleSpanSink:
    """Create the process's sink and configure telemetry with it, once."""
    global _sink
    from scroll_core import telemetry

    with _sink_lock:
        state = telemetry.state()
        if _sink is not None and state is not None and _sink in state.sinks:
            return _sink
        _sink = ConsoleSpanSink()
        telemetry.configure(sinks=[_sink])
        return _sink
