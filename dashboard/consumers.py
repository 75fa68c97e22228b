"""WebSocket consumers of the live pages: thin, one per kind of page.

Each consumer refuses an anonymous socket (closes before accepting), joins its groups, then
accepts. Handlers are named after the message ``type`` (``span.finished`` ->
``span_finished``) and answer with HTML fragments carrying ``hx-swap-oob`` so htmx's ws
extension swaps them into the page: the same partial templates the pages include, rendered
server-side, so live rows and reloaded rows are identical and event text is always escaped.

Every consumer also joins the alerts group: the open-alert count in the header is live on
every page.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from typing import Any
from urllib.parse import parse_qs

from channels.consumer import get_handler_name
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.template.loader import render_to_string

from dashboard import live
from dashboard.groups import ALERTS, SESSION_PREFIX, SPANS
from dashboard.spans import remember_server_loop

# A span is rendered once per process and shared by every socket that shows it; the cache
# holds the newest few so a burst fanned out to many sockets renders each span once.
_RENDER_CACHE_SIZE = 2048
_render_cache: OrderedDict[tuple[str, str], list[str]] = OrderedDict()
_SAFE_ID = re.compile(r"^[0-9a-f]{16}$")


def render_span_fragments(span: dict[str, Any]) -> list[str]:
    """The span row, and for an eviction, fold or compress its timeline entry, as OOB frames.

    Rendered once per span and shared by every socket that shows it.
    """
    key = (span.get("trace_id", ""), span.get("span_id", ""))
    frames = _render_cache.get(key)
    if frames is None:
        row = live.span_row(span)
        frames = [render_to_string("dashboard/_span_oob.html", {"s": row})]
        if row["timeline"]:
            frames.append(render_to_string("dashboard/_timeline_oob.html", {"s": row}))
        _render_cache[key] = frames
        if len(_render_cache) > _RENDER_CACHE_SIZE:
            _render_cache.popitem(last=False)
    return frames


class _LiveConsumer(AsyncWebsocketConsumer):
    """Shared connect/disconnect and the alert handler; subclasses name their groups."""

    def _groups(self) -> list[str]:
        return [ALERTS]

    async def connect(self) -> None:
        # The loop this consumer runs on is the one the span sink must send on.
        remember_server_loop()
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close()
            return
        self.joined = self._groups()
        for group in self.joined:
            await self.channel_layer.group_add(group, self.channel_name)
        await self.accept()

    async def dispatch(self, message: dict[str, Any]) -> None:
        # Channels' dispatch closes stale database connections through a thread hop before
        # every message; here only the handlers that query (database_sync_to_async, which
        # cleans up itself) touch the database, and a span frame must not wait for a thread.
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)

    async def disconnect(self, code: int) -> None:
        for group in getattr(self, "joined", ()):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def alert_changed(self, event: dict[str, Any]) -> None:
        count = await self._open_alert_count()
        alert = live.alert_row(event["alert"])
        for part in ("count", "remove", "row"):
            html = render_to_string(
                "dashboard/_alert_oob.html", {"alert": alert, "count": count, "part": part}
            )
            await self.send(text_data=html.strip())

    async def span_finished(self, event: dict[str, Any]) -> None:
        if self._wants(event["span"]):
            for frame in render_span_fragments(event["span"]):
                await self.send(text_data=frame)

    async def spans_finished(self, event: dict[str, Any]) -> None:
        """A batch, oldest first: all rows in one frame, all timeline entries in another."""
        rows: list[str] = []
        timeline: list[str] = []
        for span in event["spans"]:
            if self._wants(span):
                frames = render_span_fragments(span)
                rows.append(frames[0])
                timeline.extend(frames[1:])
        for frame in ("".join(rows), "".join(timeline)):
            if frame:
                await self.send(text_data=frame)

    async def session_changed(self, event: dict[str, Any]) -> None:
        row = await self._session_row(event["session_id"])
        parts = ("remove", "insert") if getattr(self, "session_rows", False) else ("replace",)
        for part in parts:
            html = render_to_string("dashboard/_session_oob.html", {"r": row, "part": part})
            await self.send(text_data=html.strip())

    def _wants(self, span: dict[str, Any]) -> bool:
        return True

    @database_sync_to_async
    def _open_alert_count(self) -> int:
        return live.open_alert_count()

    @database_sync_to_async
    def _session_row(self, session_id: str) -> Any:
        from dashboard.eventlog import get_event_log
        from dashboard.views import session_row

        return session_row(get_event_log(), session_id)


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
    by the newest event), so a brand-new session appears without a reload.
    """

    def _groups(self) -> list[str]:
        query = parse_qs(self.scope.get("query_string", b"").decode("latin-1"))
        flat = {k: v[-1] for k, v in query.items()}
        self.filters = live.SpanFilter.from_query(flat)
        self.spans = flat.get("spans") != "0"
        self.session_rows = flat.get("sessions") == "1"
        return [SPANS, ALERTS]

    def _wants(self, span: dict[str, Any]) -> bool:
        return self.spans and self.filters.matches(span)


class SessionConsumer(_LiveConsumer):
    """One session's spans (``ws/sessions/<sha1(session_id)[:16]>/``)."""

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
