"""The console's span sink: persist finished spans, evaluate the alert rules, push both to
the Channels groups of ``dashboard.groups``.

``on_span`` runs on whatever thread ended the span (often an agent's), so it only puts the
record on a bounded queue and returns: it never blocks and never raises. A full queue drops
the span and counts it in ``dropped``. One worker thread drains the queue in batches, writes
``SpanRecord`` rows (oldest pruned past ``SCROLL_SPAN_RETENTION``), runs the alert engine,
renders each span's row once (``dashboard.span_frames``: off the server's event loop, shared by
every socket) and sends one ``spans.finished`` message per group and batch (a group no socket
can be in, ``dashboard.push.heard``, gets none and costs no rendering), and the
``alert.changed`` ones (one hop per batch, see below).
The process's sink lints a session's finished turns together, ``LIVE_LINT_WAIT_S`` after the first
of them, not at each turn end (``lint_wait_s``; 0 lints each turn as its span is processed).
Every failure there is logged and counted in ``errors``; the agent never sees it.

Messages go out through ``dashboard.push`` (on the server's loop when one is known). The
worker does not wait for the loop to take a batch: it stores and renders the next one
meanwhile, and hands that over once the previous is out (batches stay in order, one in
flight). A batch lingers ``SCROLL_SPAN_LINGER_MS`` counted from its first span's end, so a
span that already waited behind the previous batch does not wait again.

A batch that meets a console database outage is not lost: it goes to the on-disk spool
(``dashboard.telemetry.spool``), as does every batch after it while the spool holds any, and
the worker stores the spool's batches, oldest first, once the database answers (tried every
``SPOOL_RETRY_S``).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import IntegrityError, close_old_connections, connection, transaction
from django.db.models import F, Sum, Window

from dashboard import groups
from dashboard.bulk_insert import insert_rows
from dashboard.outage import database_unavailable
from dashboard.push import Sending, heard, send_groups, start_sending
from dashboard.span_frames import render_row, spans_message
from dashboard.telemetry.alerts import AlertEngine, Trigger, raise_alert
from dashboard.telemetry.models import AlertRule, SpanRecord
from dashboard.telemetry.spool import DEFAULT_SPOOL_BYTES, SpanSpool

__all__ = [
    "ConsoleSpanSink",
    "get_sink",
    "span_retention",
]

log = logging.getLogger("dashboard.telemetry.spans")

DEFAULT_RETENTION = 50_000
DEFAULT_RETENTION_BYTES = 200_000_000
DEFAULT_QUEUE_SIZE = 10_000
BATCH = 200
# The worker waits this long after a span for more before processing the batch: a burst
# then goes out as one message per group (and one WebSocket frame per page) instead of one
# per span, which is what keeps a busy server's event loop from falling behind
# (settings.SCROLL_SPAN_LINGER_MS; every span waits up to this long, bench/console.py).
DEFAULT_LINGER_MS = 20
# Pruning deletes in one statement; checking after every batch would be wasted work.
PRUNE_EVERY = 500
# While the console database is away, the spool is tried again this often.
SPOOL_RETRY_S = 1.0
# The process's sink lints a session's finished turns together once the first of them has
# waited this long, not at each turn end: the lint (an Event Log read, the Alert query, the
# turns' terms) cost every gateway request ~6 ms p50 and 20-25 ms p95 of the web process's
# interpreter; batched, a session that sends a request every few ms pays it once a second.
# A flag's alert comes at most this much (plus a worker wake-up, 0.5 s) after its turn.
# settings.SCROLL_LIVE_LINT_WAIT_MS (0: at each turn end).
LIVE_LINT_WAIT_S = 1.0


def live_lint_wait_s() -> float:
    ms = getattr(settings, "SCROLL_LIVE_LINT_WAIT_MS", None)
    return LIVE_LINT_WAIT_S if ms is None else max(0, int(ms)) / 1000


def _waited_s(record: Any) -> float:
    """How long ago ``record`` ended (0 for anything without an end time)."""
    end_ns = getattr(record, "end_ns", None)
    return max(0.0, (time.time_ns() - end_ns) / 1e9) if isinstance(end_ns, int) else 0.0


def default_spool() -> SpanSpool:
    """The spool under the data folder, bounded by settings.SCROLL_SPAN_SPOOL_BYTES."""
    folder = Path(settings.SCROLL_DATA_DIR) / "span-spool"
    return SpanSpool(folder, int(getattr(settings, "SCROLL_SPAN_SPOOL_BYTES", DEFAULT_SPOOL_BYTES)))


def span_linger_s() -> float:
    """How long the worker waits for company after a span (settings.SCROLL_SPAN_LINGER_MS)."""
    return max(0, int(getattr(settings, "SCROLL_SPAN_LINGER_MS", DEFAULT_LINGER_MS))) / 1000


def span_retention() -> int:
    """How many spans are kept (settings.SCROLL_SPAN_RETENTION, default 50,000)."""
    return max(1, int(getattr(settings, "SCROLL_SPAN_RETENTION", DEFAULT_RETENTION)))


def span_retention_bytes() -> int:
    """How many bytes of spans are kept (settings.SCROLL_SPAN_RETENTION_BYTES, default 200 MB):
    a cell can make spans heavy, so a count alone does not bound the console's database."""
    return max(1, int(getattr(settings, "SCROLL_SPAN_RETENTION_BYTES", DEFAULT_RETENTION_BYTES)))


class ConsoleSpanSink:
    """A ``scroll_core.telemetry.SpanSink``; see the module docstring."""

    def __init__(
        self,
        *,
        maxsize: int = DEFAULT_QUEUE_SIZE,
        start: bool = True,
        linger_s: float | None = None,
        spool: SpanSpool | None = None,
        lint_wait_s: float = 0.0,
    ) -> None:
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=maxsize)
        self.linger_s = span_linger_s() if linger_s is None else linger_s
        # 0: lint each turn as its span is processed; else see LIVE_LINT_WAIT_S.
        self.lint_wait_s = lint_wait_s
        self.spool = spool if spool is not None else default_spool()
        self.spooled = 0  # spans written to the spool
        self.unspooled = 0  # spans stored from it
        self._outage_since: float | None = None
        self._spool_retry_at = 0.0
        self.engine = AlertEngine()
        self.received = 0
        self.dropped = 0
        self.stored = 0
        self.errors = 0
        # Spans pruned before the count retention reached them, to stay under the bytes.
        self.pruned_for_bytes = 0
        self._since_prune = 0
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        self._sending: Sending | None = None  # the batch the server's loop is sending
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
                    self._drain_spool()
                    if self.engine.lint_waiting() and not self.spool.files():
                        close_old_connections()
                        self._lint_due()
                    continue
                # Linger a moment for company: one message per group per batch, not per span.
                # Asleep, not woken by each span that arrives meanwhile: every wake-up takes
                # the interpreter from the request that is producing those spans. Counted
                # from the span's end: one that waited while the last batch went out has
                # had its company already.
                batch = [first]
                linger = self.linger_s - _waited_s(first)
                if linger > 0:
                    self._closed.wait(linger)
                while len(batch) < BATCH:
                    try:
                        batch.append(self._queue.get_nowait())
                    except queue.Empty:
                        break
                try:
                    self._take(batch)
                    if self._queue.empty():
                        self._sent()  # nothing behind it: flush() returns once it is out
                except Exception:
                    self.errors += 1
                    log.exception("console: span batch of %d failed", len(batch))
                finally:
                    for _ in batch:
                        self._queue.task_done()
        finally:
            self._sent()
            self.lint_now()  # the turns still waiting are not left unjudged
            connection.close()

    def _send(self, outbox: list[tuple[str, dict[str, Any]]]) -> None:
        """Hand a batch's messages to the server's loop and return: the worker stores and
        renders the next batch while the loop sends this one. The previous batch must be
        out first: batches stay in order, and at most one is in flight."""
        self._sent()
        self._sending = start_sending(outbox)

    def _sent(self) -> None:
        """Wait for the batch in flight; a failed send is counted in ``errors``."""
        sending, self._sending = self._sending, None
        if sending is not None and not sending.done():
            self.errors += 1

    def _take(self, batch: list[Any]) -> None:
        """Process a batch, or spool it when the database is away (or spans wait before
        it, which keeps them in the order they ended)."""
        records = [r for r in batch if r is not None]
        if self.spool.files():
            self._spool(records)
            self._drain_spool()
            return
        try:
            close_old_connections()
            self.process(records, wait=False)
        except Exception as exc:
            if not database_unavailable(exc):
                raise
            self._database_away(exc)
            self._spool(records)

    def _spool(self, records: list[Any]) -> None:
        self.spool.put([r.to_dict() for r in records])
        self.spooled += len(records)

    def _database_away(self, exc: BaseException) -> None:
        self._spool_retry_at = time.monotonic() + SPOOL_RETRY_S
        if self._outage_since is None:
            self._outage_since = time.monotonic()
            log.warning(
                "console database unreachable (%s): spans wait in %s until it is back",
                type(exc).__name__,
                self.spool.folder,
            )

    def _drain_spool(self) -> None:
        """Store the spool's batches, oldest first, until it is empty or the database is
        still away (then again SPOOL_RETRY_S later)."""
        if time.monotonic() < self._spool_retry_at:
            return
        from scroll_core.telemetry import SpanRecord as CoreSpan

        for path in self.spool.files():
            spans = self.spool.read(path)
            if spans is None:
                continue
            try:
                close_old_connections()
                self.process([CoreSpan(**span) for span in spans])
            except Exception as exc:
                if database_unavailable(exc):
                    self._database_away(exc)
                    return
                self.errors += 1
                log.exception("console: a spooled batch of %d spans failed", len(spans))
            self.spool.remove(path)
            self.unspooled += len(spans)
        if self._outage_since is not None:
            log.info(
                "console database back after %.1f s: spooled spans stored (%d dropped from "
                "the spool since start, SCROLL_SPAN_SPOOL_BYTES)",
                time.monotonic() - self._outage_since,
                self.spool.dropped,
            )
            self._outage_since = None

    def _lint_due(self, *, everything: bool = False) -> None:
        """Lint the sessions whose turns have waited ``lint_wait_s`` (all with
        ``everything``) and push the alerts it changed. Never raises."""
        try:
            changed = self.engine.lint_due(self.lint_wait_s, everything=everything)
        except Exception:
            self.errors += 1
            log.exception("console: the deferred trajectory lint failed")
            return
        outbox = [(groups.ALERTS, {"type": "alert.changed", "alert": a.to_dict()}) for a in changed]
        if outbox and not send_groups(outbox):
            self.errors += 1

    def lint_now(self) -> None:
        """Lint every session whose turns wait for it (tests, shutdown)."""
        self._lint_due(everything=True)

    def process(self, records: Iterable[Any], *, wait: bool = True) -> list[SpanRecord]:
        """Persist, evaluate and push one batch (the worker calls this; tests may too);
        returns once its messages are sent unless ``wait`` is False (the worker's own
        batches, see ``_send``)."""
        rows = self._store([SpanRecord.from_core(r) for r in records if r is not None])
        by_group: dict[str, tuple[list[dict[str, Any]], list[str]]] = {}
        alerts: list[tuple[str, dict[str, Any]]] = []
        defer = self.lint_wait_s > 0
        for row in rows:
            span = row.to_dict()
            try:
                changed = self.engine.observe(span, defer_lint=defer)
            except Exception:
                self.errors += 1
                log.exception("console: alert rules failed on %s", row.name)
                changed = []
            alerts.extend(
                (groups.ALERTS, {"type": "alert.changed", "alert": alert.to_dict()})
                for alert in changed
            )
            targets = [groups.SPANS]
            if row.session_id:
                targets.append(groups.session_group(row.session_id))
            # A group no socket can be in gets nothing (stored above: a page that opens
            # later reads the span back), and a row no group gets is not rendered.
            targets = [group for group in targets if heard(group)]
            if not targets:
                continue
            # Rendered once, here: every group and every socket shares the row.
            html = render_row(span)
            for group in targets:
                spans, htmls = by_group.setdefault(group, ([], []))
                spans.append(span)
                htmls.append(html)
        if defer:
            try:
                alerts.extend(
                    (groups.ALERTS, {"type": "alert.changed", "alert": alert.to_dict()})
                    for alert in self.engine.lint_due(self.lint_wait_s)
                )
            except Exception:
                self.errors += 1
                log.exception("console: the deferred trajectory lint failed")
        outbox = [
            (group, spans_message(spans, htmls)) for group, (spans, htmls) in by_group.items()
        ] + alerts
        # The whole batch in one hop to the server's loop, in order.
        self._send(outbox)
        if wait:
            self._sent()
        self._since_prune += len(rows)
        if self._since_prune >= PRUNE_EVERY:
            self._since_prune = 0
            self.prune()
        return rows

    def _store(self, rows: list[SpanRecord]) -> list[SpanRecord]:
        try:
            with transaction.atomic():
                insert_rows(rows)
            stored = rows
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
        """Delete the oldest spans beyond the retention in spans, then beyond the retention
        in bytes; returns how many went."""
        keep = span_retention()
        newest = SpanRecord.objects.order_by("-id").values_list("id", flat=True).first()
        if newest is None:
            return 0
        deleted, _ = SpanRecord.objects.filter(id__lte=newest - keep).delete()
        over = self._newest_over_bytes(span_retention_bytes())
        if over is not None:
            by_bytes, _ = SpanRecord.objects.filter(id__lte=over).delete()
            self.pruned_for_bytes += by_bytes
            deleted += by_bytes
            log.warning(
                "console: %d spans pruned to keep the stored spans under %d bytes "
                "(SCROLL_SPAN_RETENTION_BYTES)",
                by_bytes,
                span_retention_bytes(),
            )
            self._alert_pruned(by_bytes)
        return deleted

    def _alert_pruned(self, by_bytes: int) -> None:
        """Raise (or bump) the console-wide ``spans_pruned`` alert and tell the live pages:
        spans went before their count said, so Traces lost history someone may need."""
        rule = self.engine.rules().get(AlertRule.SPANS_PRUNED)
        if rule is None or not rule.enabled:
            return
        message = (
            f"{by_bytes:,} of the oldest stored spans were pruned to stay under "
            f"{span_retention_bytes():,} bytes (SCROLL_SPAN_RETENTION_BYTES); "
            f"{self.pruned_for_bytes:,} since this process started"
        )
        alert = raise_alert(Trigger(AlertRule.SPANS_PRUNED, "", message), rule)
        if alert is not None:
            send_groups([(groups.ALERTS, {"type": "alert.changed", "alert": alert.to_dict()})])

    @staticmethod
    def _newest_over_bytes(budget: int) -> int | None:
        """The id of the newest span that no longer fits in ``budget`` bytes counted from the
        newest span down (it and everything older go); None when all fit."""
        if (SpanRecord.objects.aggregate(total=Sum("size_bytes"))["total"] or 0) <= budget:
            return None
        running = Window(Sum("size_bytes"), order_by=F("id").desc())
        return (
            SpanRecord.objects.annotate(running=running)
            .filter(running__gt=budget)
            .order_by("-id")
            .values_list("id", flat=True)
            .first()
        )

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
            "pruned_for_bytes": self.pruned_for_bytes,
            "queued": self._queue.qsize(),
            "spooled": self.spooled,
            "unspooled": self.unspooled,
            "spool_pending": self.spool.pending(),
            "spool_dropped": self.spool.dropped,
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
        _sink = ConsoleSpanSink(lint_wait_s=live_lint_wait_s())
        telemetry.configure(sinks=[_sink])
        return _sink
