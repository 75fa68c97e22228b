"""WebSocket consumers of the live pages: thin, one per kind of page.

Each consumer refuses an anonymous socket (closes before accepting), joins its groups, then
accepts. Handlers are named after the message ``type`` (``span.finished`` ->
``span_finished``) and answer with HTML fragments carrying ``hx-swap-oob`` so htmx's ws
extension swaps them into the page: the same partial templates the pages include, rendered
server-side, so live rows and reloaded rows are identical and event text is always escaped.

Every consumer also joins the alerts group: the open-alert count in the header is live on
every page.

A page passes the cursor of what it rendered in the socket's query string (``span_after``,
``seq_after``, ``compress_after``, ``runs_after``, ``alerts_after``; see ``live.ws_url``). On
connect, after joining its groups, the consumer first sends what was stored after that cursor,
so whatever finished between the page rendering and its socket connecting is not lost; with
several producers ids do not commit in order, so a cursor also names the ids missing below it
when the page rendered (``span_gaps``, ``compress_gaps``; see ``live.id_gaps``) and the
catch-up sends the rows that filled them. The channel layer holds live messages until
``connect`` returns, so they come after the catch-up; a span this socket already sent is
skipped by its id (never by comparing ids: a lower one may be new), and the browser drops any
row whose id it already has (static/scroll.js).
"""

from __future__ import annotations

import asyncio
import re
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qs

from channels.consumer import get_handler_name
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.template.loader import render_to_string

from dashboard.console import live
from dashboard.groups import ALERTS, KERNELS, SESSION_PREFIX, SPANS, session_safe_id
from dashboard.layer_outage import LAYER_DOWN_ERRORS, layer_outage
from dashboard.projects.access import Access
from dashboard.push import remember_server_loop
from dashboard.span_frames import render_row, span_frame

# Spans that arrive without their rows (the catch-up, a sender from before batched frames)
# are rendered here, once per process: the newest few are kept for the other sockets.
_RENDER_CACHE_SIZE = 2048
_render_cache: OrderedDict[tuple[str, str], str] = OrderedDict()
_SAFE_ID = re.compile(r"^[0-9a-f]{16}$")
# Spans after which a session page's header, index, kernel or charts may have changed.
REFRESH_SPANS = frozenset(
    {
        "scroll.compress",
        "scroll.evict",
        "scroll.fold",
        "scroll.expand",
        "scroll.profile.applied",
        "scroll.kernel.restart",
    }
)
# A burst of changes within this long costs one refresh of a session page's parts.
REFRESH_DELAY_S = 0.2
# Span ids a socket remembers having sent (a live span repeats one only shortly after).
_SENT_IDS = 4096
# A socket whose layer is down tries to join its groups again after this long, doubling
# up to REJOIN_MAX_S: a Redis restart on loopback takes about a second.
REJOIN_FIRST_S = 0.25
REJOIN_MAX_S = 2.0


def rendered_row(span: dict[str, Any]) -> str:
    """The span's row (``span_frames.render_row``), rendered once per process."""
    key = (span.get("trace_id", ""), span.get("span_id", ""))
    row = _render_cache.get(key)
    if row is None:
        row = _render_cache[key] = render_row(span)
        if len(_render_cache) > _RENDER_CACHE_SIZE:
            _render_cache.popitem(last=False)
    return row


class _LiveConsumer(AsyncWebsocketConsumer):
    """Shared connect/disconnect and the alert handler; subclasses name their groups."""

    # The page's span cursor (None: the page wants no catch-up), and the ids of the spans
    # this socket has sent since, newest last: several sinks send in any id order, so a span
    # is skipped because it was sent, never because its id is lower than another's.
    span_after: int | None = None
    _sent: OrderedDict[int, None] | None = None
    # What the user reads (dashboard.projects): every frame is checked against it.
    access: Access

    def _groups(self) -> list[str]:
        return [ALERTS]

    def _query(self) -> dict[str, str]:
        query = parse_qs(self.scope.get("query_string", b"").decode("latin-1"))
        return {k: v[-1] for k, v in query.items()}

    async def catch_up(self, query: dict[str, str]) -> None:
        """Send what changed after the page's cursors; subclasses add their own rows."""
        since = live.time_cursor(query.get("alerts_after"))
        if since is not None:
            count, alerts = await self._alerts_since(since)
            if alerts:
                await self._send_alerts(count, alerts)

    async def connect(self) -> None:
        # The loop this consumer runs on is the one the span sink must send on.
        remember_server_loop()
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close()
            return
        self.access = await self._access(user)
        if not await self._may_join():
            await self.close()
            return
        self.joined = self._groups()
        # A layer that is down does not refuse the page (a handshake 500): the socket opens
        # paused and joins when the layer is back (see _receive_or_pause).
        self._paused = not await self._join()
        await self.accept()
        self._open = True
        if self._paused:
            await self._send_live_status()
        await self.catch_up(self._query())

    # -- the channel layer going away (Redis stopped or restarting) -----------------------
    # Channels waits on the layer from the start, so these may come before ``connect``:
    # nothing is sent before the socket is accepted (connect says it is paused itself).
    _paused = False
    _open = False

    @property
    def channel_receive(self) -> Callable[[], Awaitable[dict[str, Any]]]:
        return self._receive_or_pause

    @channel_receive.setter
    def channel_receive(self, receive: Callable[[], Awaitable[dict[str, Any]]]) -> None:
        # Channels binds the layer's receive here (AsyncConsumer.__call__) and ends the
        # consumer when it raises, dropping the socket; this socket pauses instead.
        self._layer_receive = receive

    async def _receive_or_pause(self) -> dict[str, Any]:
        """The layer's next message; ``layer.paused`` when it cannot be reached, then
        ``layer.resumed`` once this socket has joined its groups again."""
        if self._paused:
            delay = REJOIN_FIRST_S
            while not (self._open and await self._join()):
                await asyncio.sleep(delay)
                delay = min(delay * 2, REJOIN_MAX_S)
            return {"type": "layer.resumed"}
        try:
            return await self._layer_receive()
        except LAYER_DOWN_ERRORS as exc:
            layer_outage.failed(exc, 0)
            return {"type": "layer.paused"}

    async def _join(self) -> bool:
        """Join this socket's groups; False when the layer cannot be reached. Joining again
        is harmless, and needed after a restart: a Redis without persistence forgot them."""
        try:
            for group in getattr(self, "joined", ()):
                await self.channel_layer.group_add(group, self.channel_name)
        except LAYER_DOWN_ERRORS as exc:
            layer_outage.failed(exc, 0)
            return False
        layer_outage.answered()
        return True

    async def layer_paused(self, event: dict[str, Any]) -> None:
        was_paused, self._paused = self._paused, True
        if self._open and not was_paused:
            await self._send_live_status()

    async def layer_resumed(self, event: dict[str, Any]) -> None:
        """Back: say so, then send what changed meanwhile as a reconnect would (the page's
        cursors; rows it already shows are replaced, not repeated)."""
        self._paused = False
        if self._open:
            await self._send_live_status()
            await self.catch_up(self._query())

    async def _send_live_status(self) -> None:
        ctx = {"paused": self._paused, "oob": True}
        await self.send(text_data=render_to_string("dashboard/_live_status.html", ctx).strip())

    async def dispatch(self, message: dict[str, Any]) -> None:
        # Channels' dispatch closes stale database connections through a thread hop before
        # every message; here only the handlers that query (database_sync_to_async, which
        # cleans up itself) touch the database, and a span frame must not wait for a thread.
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)

    async def disconnect(self, code: int) -> None:
        try:
            for group in getattr(self, "joined", ()):
                await self.channel_layer.group_discard(group, self.channel_name)
        except LAYER_DOWN_ERRORS as exc:
            # Redis drops a dead channel's membership by itself (group_expiry).
            layer_outage.failed(exc, 0)

    @database_sync_to_async
    def _access(self, user: Any) -> Access:
        return Access(user)

    async def _may_join(self) -> bool:
        return True

    async def _readable(self, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The spans or alerts (dicts with ``session_id``) of sessions the user reads."""
        if self.access.everything:
            return items  # no thread hop: the default console pays nothing
        return await database_sync_to_async(self.access.visible)(items)

    async def _reads_session(self, session_id: str) -> bool:
        if self.access.everything:
            return True
        return bool(await database_sync_to_async(self.access.sees_session)(session_id))

    async def alert_changed(self, event: dict[str, Any]) -> None:
        if not await self._readable([event["alert"]]):
            return
        count = await self._open_alert_count()
        await self._send_alerts(count, [event["alert"]])

    async def _send_alerts(self, count: int, alerts: list[dict[str, Any]]) -> None:
        # Each row moves (data-move): the page drops the one it showed, so a repeat never
        # shows twice and a change of state never shows none.
        frames = [("count", None)] + [("row", a) for a in alerts]
        for part, alert in frames:
            ctx = {"alert": live.alert_row(alert or {}), "count": count, "part": part}
            html = render_to_string("dashboard/_alert_oob.html", ctx)
            await self.send(text_data=html.strip())

    async def span_finished(self, event: dict[str, Any]) -> None:
        """One span (a sender from before batched frames): a batch of one."""
        await self.spans_finished({"type": "spans.finished", "spans": [event["span"]]})

    async def spans_finished(self, event: dict[str, Any]) -> None:
        """A batch, oldest first, in one frame (``dashboard.span_frames``): the sender's frame
        as it came when this socket shows every span of it, else one of the rows it shows.
        Rows come rendered with the message; only one without them (the catch-up) is
        rendered here."""
        spans = event["spans"]
        shown = [i for i, span in enumerate(spans) if self._wants(span)]
        if shown and not self.access.everything:
            readable = {id(span) for span in await self._readable([spans[i] for i in shown])}
            shown = [i for i in shown if id(spans[i]) in readable]
        if not shown:
            return
        for i in shown:
            self._seen(spans[i])
        frame = event.get("frame")
        if frame is None or len(shown) != len(spans):
            rows = event.get("rows")
            if rows is None:
                rows = [rendered_row(span) for span in spans]
            frame = span_frame([rows[i] for i in shown])
        await self.send(text_data=frame)

    async def _send_session_row(self, row: Any) -> None:
        part = "move" if getattr(self, "session_rows", False) else "replace"
        html = render_to_string("dashboard/_session_oob.html", {"r": row, "part": part})
        await self.send(text_data=html.strip())

    def _wants(self, span: dict[str, Any]) -> bool:
        return self._unseen(span)

    def _unseen(self, span: dict[str, Any]) -> bool:
        span_id = span.get("id")
        return span_id is None or self._sent is None or span_id not in self._sent

    def _seen(self, span: dict[str, Any]) -> None:
        span_id = span.get("id")
        if span_id is None:
            return
        if self._sent is None:
            self._sent = OrderedDict()
        self._sent[span_id] = None
        if len(self._sent) > _SENT_IDS:
            self._sent.popitem(last=False)

    @database_sync_to_async
    def _open_alert_count(self) -> int:
        return live.open_alert_count(self.access)

    @database_sync_to_async
    def _alerts_since(self, since: Any) -> tuple[int, list[dict[str, Any]]]:
        return live.open_alert_count(self.access), live.alerts_changed_since(since, self.access)

    @database_sync_to_async
    def _spans_after(self, span_id: int, **where: Any) -> list[dict[str, Any]]:
        return self.access.visible(live.spans_after(span_id, **where))


class AlertsConsumer(_LiveConsumer):
    """Pages with nothing else live: just the header count (and the alerts page's rows)."""

    async def span_finished(self, event: dict[str, Any]) -> None:
        return None

    async def spans_finished(self, event: dict[str, Any]) -> None:
        return None

    async def session_changed(self, event: dict[str, Any]) -> None:
        return None


class FeedConsumer(_LiveConsumer):
    """Every span and session change: the sessions table and the traces stream.

    The traces page passes its filters in the query string (``session``, ``op``,
    ``errors=1``, ``slow_ms``) so only matching spans are sent; the sessions page passes
    ``spans=0``: it wants session changes only. Its first page also passes ``sessions=1``: a
    changed session's row, new or not, then moves to the top of the table (which is ordered
    by the newest event), so a brand-new session appears without a reload. Rows go out
    ``REFRESH_DELAY_S`` after a change, one per session however often it changed meanwhile;
    a page that takes spans (the traces page) has no sessions table and is sent no rows.

    The Kernels page passes ``kernels=1`` (its table is re-sent whenever a session changes,
    and when a web process says its gateway kernels changed: group ``KERNELS``)
    and the Runs page ``runs=1`` (a changed run's row is replaced, or inserted on top when
    the page does not show it yet); both want no spans and no session rows.
    """

    kernel_rows = False
    run_rows = False
    session_table = False
    _row_sender: asyncio.Future[None] | None = None
    can_stop = False

    def _groups(self) -> list[str]:
        flat = self._query()
        self.filters = live.SpanFilter.from_query(flat)
        self.spans = flat.get("spans") != "0"
        self.session_rows = flat.get("sessions") == "1"
        self.kernel_rows = flat.get("kernels") == "1"
        self.run_rows = flat.get("runs") == "1"
        # Only the sessions page (no spans, no kernel or run table) shows session rows. A
        # traces page is sent none: each row is a query and a render, and under load the
        # queries queued the span frames behind them (bench/scale.py's two-worker arm).
        self.session_table = not (self.spans or self.kernel_rows or self.run_rows)
        self._rows_due: OrderedDict[str, None] = OrderedDict()
        return [SPANS, ALERTS, KERNELS] if self.kernel_rows else [SPANS, ALERTS]

    async def kernels_changed(self, event: dict[str, Any]) -> None:
        """A web process's gateway kernel started, changed or stopped."""
        if self.kernel_rows:
            await self.send(text_data=await self._kernel_frame())

    async def session_changed(self, event: dict[str, Any]) -> None:
        if not await self._reads_session(event["session_id"]):
            return
        if self.kernel_rows:
            await self.send(text_data=await self._kernel_frame())
        if self.run_rows:
            for frame in await self._run_frames(event["session_id"]):
                await self.send(text_data=frame)
        if self.session_table:
            self._row_soon(event["session_id"])

    def _row_soon(self, session_id: str) -> None:
        """Send ``session_id``'s row REFRESH_DELAY_S from now, with every other session that
        changes meanwhile: a run changes its session at every step, and a row is a query, so
        a burst of changes costs each session one row, sent in the order they last changed
        (on the first page each goes to the top, so the newest change ends up highest)."""
        self._rows_due.pop(session_id, None)
        self._rows_due[session_id] = None
        if self._row_sender is None or self._row_sender.done():
            self._row_sender = asyncio.ensure_future(self._send_rows_due())

    async def _send_rows_due(self) -> None:
        while self._rows_due:
            await asyncio.sleep(REFRESH_DELAY_S)
            due, self._rows_due = list(self._rows_due), OrderedDict()
            for row in await self._session_rows(due):
                await self._send_session_row(row)

    @database_sync_to_async
    def _session_rows(self, session_ids: list[str]) -> list[Any]:
        from dashboard.console.views import session_row
        from dashboard.eventlog import get_event_log

        log = get_event_log()
        return [session_row(log, session_id) for session_id in session_ids]

    async def disconnect(self, code: int) -> None:
        if self._row_sender is not None:
            self._row_sender.cancel()
        await super().disconnect(code)

    @database_sync_to_async
    def _kernel_frame(self) -> str:
        from dashboard.console.views import kernel_rows_context

        ctx = kernel_rows_context(self.scope.get("user"), self.access) | {"oob": True}
        return render_to_string("dashboard/_kernel_rows.html", ctx).strip()

    @database_sync_to_async
    def _run_frames(self, session_id: str) -> list[str]:
        from dashboard.runs.models import RunRecord
        from dashboard.runs.permissions import STOP_RUN

        run = RunRecord.objects.select_related("profile").filter(session_id=session_id).first()
        if run is None or not self.access.sees_session(session_id):
            return []
        user = self.scope.get("user")
        ctx = {"r": run, "can_stop": bool(user is not None and user.has_perm(STOP_RUN))}
        return [
            render_to_string("dashboard/_run_oob.html", ctx | {"part": part}).strip()
            for part in ("replace", "insert")
        ]

    def _wants(self, span: dict[str, Any]) -> bool:
        return self.spans and self.filters.matches(span) and self._unseen(span)

    async def catch_up(self, query: dict[str, str]) -> None:
        await super().catch_up(query)
        self.span_after = live.int_cursor(query.get("span_after"))
        if self.spans and self.span_after is not None:
            await self.spans_finished(
                {
                    "spans": await self._spans_after(
                        self.span_after,
                        gaps=live.gaps_cursor(query.get("span_gaps")),
                        filters=self.filters,
                    )
                }
            )
        seq = live.int_cursor(query.get("seq_after"))
        since = live.time_cursor(query.get("runs_after"))
        if self.kernel_rows:
            await self.send(text_data=await self._kernel_frame())
        elif self.run_rows:
            if since is not None:
                for session_id in await self._runs_since(since):
                    for frame in await self._run_frames(session_id):
                        await self.send(text_data=frame)
        elif seq is not None or since is not None:
            for row in await self._sessions_since(seq, since):
                await self._send_session_row(row)

    @database_sync_to_async
    def _runs_since(self, since: Any) -> list[str]:
        found = live.sessions_changed_since(None, since)
        return [sid for sid in found if self.access.sees_session(sid)]

    @database_sync_to_async
    def _sessions_since(self, seq: int | None, since: Any) -> list[Any]:
        from dashboard.console.views import session_row
        from dashboard.eventlog import get_event_log

        log = get_event_log()
        return [
            session_row(log, sid)
            for sid in live.sessions_changed_since(seq, since)
            if self.access.sees_session(sid)
        ]


class SessionConsumer(_LiveConsumer):
    """One session's spans and live parts (``ws/sessions/<sha1(session_id)[:16]>/``).

    Besides span rows it keeps the header figures, index table, kernel panel, chart figures
    and timeline live: a ``session.changed`` (the run stepped, started, ended, or its profile
    was edited) or a span that changes the view schedules one refresh, REFRESH_DELAY_S later
    (a burst costs one), which re-renders the partials the page includes and sends the
    timeline entries written after this socket's cursors.
    """

    session_id = ""
    compress_after: int | None = None
    change_after: int | None = None
    action_after = 0
    show_none = False
    can_stop = False
    _refresher: asyncio.Task[None] | None = None
    _dirty = False

    def _groups(self) -> list[str]:
        safe_id = self.scope["url_route"]["kwargs"]["safe_id"]
        if not _SAFE_ID.match(safe_id):
            raise ValueError("malformed session group id")
        return [SESSION_PREFIX + safe_id, ALERTS]

    async def connect(self) -> None:
        safe_id = self.scope["url_route"]["kwargs"]["safe_id"]
        if not _SAFE_ID.match(safe_id):
            await self.close()
            return
        await super().connect()

    async def _may_join(self) -> bool:
        """Only a session the user reads: its group carries every span of the session, so the
        page must name the session (matching the group's hash) before the socket joins it."""
        session_id = self._query().get("session", "")
        if self.access.everything:
            return True
        if session_safe_id(session_id) != self.scope["url_route"]["kwargs"]["safe_id"]:
            return False
        return await self._reads_session(session_id)

    async def disconnect(self, code: int) -> None:
        if self._refresher is not None:
            self._refresher.cancel()
        await super().disconnect(code)

    async def bench_frame(self, event: dict[str, Any]) -> None:
        """bench/console.py's baseline: a ready-made row, written to the socket as is."""
        await self.send(text_data=event["html"])

    async def catch_up(self, query: dict[str, str]) -> None:
        await super().catch_up(query)
        session_id = query.get("session", "")
        # The group is named by a hash: the page names the session, and the hash must match.
        if session_safe_id(session_id) != self.scope["url_route"]["kwargs"]["safe_id"]:
            return
        self.session_id = session_id
        self.span_after = live.int_cursor(query.get("span_after"))
        if self.span_after is not None:
            spans = await self._spans_after(
                self.span_after,
                gaps=live.gaps_cursor(query.get("span_gaps")),
                session_id=session_id,
            )
            # Rows only: the refresh below covers what these spans changed.
            await super().spans_finished({"spans": spans})
        self.compress_after = live.int_cursor(query.get("compress_after"))
        self.change_after = live.int_cursor(query.get("change_after"))
        self.action_after = live.int_cursor(query.get("action_after")) or 0
        # The recorded calls the page's cost panel was rendered with: re-sent past them only.
        self.calls_after = live.int_cursor(query.get("calls_after"))
        self.show_none = query.get("none") == "1"
        self.can_stop = await self._can_stop()
        # Whatever changed between the page rendering and this socket connecting.
        await self.refresh()
        seq = live.int_cursor(query.get("seq_after"))
        if seq is not None and await self._newer_events(session_id, seq):
            html = render_to_string(
                "dashboard/_events_newer.html", {"newer_after": seq, "oob": True}
            )
            await self.send(text_data=html.strip())

    async def spans_finished(self, event: dict[str, Any]) -> None:
        await super().spans_finished(event)
        if any(span.get("name") in REFRESH_SPANS for span in event["spans"]):
            self._schedule()

    async def session_changed(self, event: dict[str, Any]) -> None:
        self._schedule()

    def _schedule(self) -> None:
        if not self.session_id:
            return
        if self._refresher is None or self._refresher.done():
            self._refresher = asyncio.ensure_future(self._refresh_soon())
        else:
            self._dirty = True

    async def _refresh_soon(self) -> None:
        while True:
            self._dirty = False
            await asyncio.sleep(REFRESH_DELAY_S)
            await self.refresh()
            if not self._dirty:
                return

    async def refresh(self) -> None:
        """Send the session's live parts and its new timeline entries."""
        if not self.session_id:
            return
        for frame in await self._frames():
            await self.send(text_data=frame)

    @database_sync_to_async
    def _frames(self) -> list[str]:
        from dashboard.console import session_live

        parts = session_live.parts_context(self.session_id)
        frames = session_live.render_parts(parts | {"can_stop": self.can_stop})
        calls = session_live.recorded_calls(self.session_id)
        if self.calls_after is not None and calls != self.calls_after:
            self.calls_after = calls  # a call was recorded: the panel shows it priced
            frames.append(session_live.render_cost(self.session_id))
        if self.compress_after is not None and self.change_after is not None:
            seen = self.compress_after
            entries, self.compress_after, self.change_after, self.action_after = (
                session_live.timeline_after(
                    self.session_id,
                    parts["run"],
                    self.compress_after,
                    self.change_after,
                    self.action_after,
                    show_none=self.show_none,
                )
            )
            if entries:
                frames.append(session_live.render_timeline(entries))
            if self.compress_after != seen:
                # New compress records (shown or "none"): the hidden count and the older link.
                page = session_live.timeline_page(
                    self.session_id, parts["run"], show_none=self.show_none
                )
                frames.append(session_live.render_pager(page))
        return frames

    @database_sync_to_async
    def _can_stop(self) -> bool:
        from dashboard.projects.models import OPERATOR
        from dashboard.runs.permissions import STOP_RUN

        user = self.scope.get("user")
        return bool(
            user is not None
            and user.has_perm(STOP_RUN)
            and self.access.sees_session(self.session_id, OPERATOR)
        )

    @database_sync_to_async
    def _newer_events(self, session_id: str, seq: int) -> int:
        return live.newer_events(session_id, seq)
