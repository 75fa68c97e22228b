"""What the live pages show, shared by the views (rows from the database) and the consumers
(rows from channel messages), so a row looks the same whichever way it arrived.

Span rows themselves are built and rendered by ``dashboard.span_frames`` (the span sink sends
them rendered); this module holds the traces filters, alert rows and the cursors.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from django.utils import timezone

from dashboard.span_frames import DEFAULT_SLOW_MS


@dataclass(frozen=True)
class SpanFilter:
    """The traces page's filters: session, operation (span name prefix), errors, slow."""

    session: str = ""
    operation: str = ""
    errors: bool = False
    slow_ms: float | None = None

    @classmethod
    def from_query(cls, query: Any) -> SpanFilter:
        slow_raw = (query.get("slow_ms") or "").strip()
        try:
            slow_ms = float(slow_raw) if slow_raw else None
        except ValueError:
            slow_ms = None
        if query.get("slow") and slow_ms is None:
            slow_ms = DEFAULT_SLOW_MS
        return cls(
            session=(query.get("session") or "").strip(),
            operation=(query.get("op") or "").strip(),
            errors=query.get("errors") in {"1", "on", "true"},
            slow_ms=slow_ms,
        )

    def matches(self, span: dict[str, Any]) -> bool:
        if self.session and (span.get("session_id") or "") != self.session:
            return False
        if self.operation and not (span.get("name") or "").startswith(self.operation):
            return False
        if self.errors and span.get("status") != "error":
            return False
        return not (self.slow_ms is not None and float(span.get("duration_ms") or 0) < self.slow_ms)

    def query_string(self) -> str:
        return urlencode(self.params())

    def params(self) -> dict[str, str]:
        params: dict[str, str] = {}
        if self.session:
            params["session"] = self.session
        if self.operation:
            params["op"] = self.operation
        if self.errors:
            params["errors"] = "1"
        if self.slow_ms is not None:
            params["slow_ms"] = f"{self.slow_ms:g}"
        return params


def alert_row(alert: dict[str, Any]) -> dict[str, Any]:
    return dict(alert)


def open_alert_count(access: Any = None) -> int:
    """Open alerts of the sessions ``access`` reads (every alert when None)."""
    from dashboard.telemetry.alerts import open_alert_count as count
    from dashboard.telemetry.models import Alert

    if access is None or access.everything:
        return count()
    return int(access.scope(Alert.objects.filter(state=Alert.OPEN)).count())


# ---------------------------------------------------------------------------- cursors
# A live page carries in its WebSocket URL what it rendered (the newest span id, Event Log
# seq, compress id, and the time it was drawn); on connect the consumer sends what was
# stored after that, at most CATCH_UP_ROWS rows, before any live message.
CATCH_UP_ROWS = 200
# Alerts and runs are updated in place and only carry timestamps: look back a little past
# the page's time so a change committed while the page rendered is not lost. Their frames
# replace rows by id, so sending one twice is harmless.
TIME_SLACK = timedelta(seconds=2)
# Span and compress ids do not commit in order once several processes write them (two span
# sinks, a web process and a worker; PostgreSQL hands out sequence values before commit): a
# row with a lower id than the page's cursor may commit after the page rendered. So a page's
# cursor is its newest id plus the ids missing among the LATE_IDS below it when it rendered
# (``id_gaps``); catch-up sends rows above the cursor and rows that filled those gaps.
LATE_IDS = 200


def now_cursor() -> str:
    return timezone.now().isoformat()


def ws_url(path: str, **params: Any) -> str:
    """``path`` with the page's filters and cursors (empty ones left out) and the alerts one."""
    query = {k: str(v) for k, v in params.items() if v is not None and v != ""}
    query["alerts_after"] = now_cursor()
    return f"{path}?{urlencode(query)}"


def int_cursor(value: str | None) -> int | None:
    """A non-negative id cursor from a query string; None when malformed or beyond any id
    the databases can hold (2**63 - 1)."""
    value = (value or "").strip()
    if not (value.isascii() and value.isdigit()):
        return None
    return int(value) if int(value) < 2**63 else None


def time_cursor(value: str | None) -> datetime | None:
    try:
        moment = datetime.fromisoformat((value or "").strip())
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment - TIME_SLACK


def id_gaps(model: Any, cursor: int) -> str:
    """The ids in ``(cursor - LATE_IDS, cursor]`` no row of ``model`` holds yet, as ranges
    ("3-5,9"): a row still in flight may commit with one of them."""
    low = max(0, cursor - LATE_IDS)
    held = set(model.objects.filter(id__gt=low, id__lte=cursor).values_list("id", flat=True))
    missing = [i for i in range(low + 1, cursor + 1) if i not in held]
    ranges: list[str] = []
    start = prev = None
    for i in [*missing, None]:
        if i is not None and prev is not None and i == prev + 1:
            prev = i
            continue
        if start is not None:
            ranges.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = i
    return ",".join(ranges)


def gaps_cursor(value: str | None) -> list[int]:
    """The ids of an ``id_gaps`` string; malformed parts are ignored, at most LATE_IDS ids."""
    ids: list[int] = []
    for part in (value or "").split(","):
        lo, _, hi = part.strip().partition("-")
        if not (lo.isascii() and lo.isdigit()) or (hi and not (hi.isascii() and hi.isdigit())):
            continue
        first, last = int(lo), int(hi or lo)
        if last < first or last >= 2**63:
            continue
        ids.extend(range(first, min(last, first + LATE_IDS - len(ids)) + 1))
        if len(ids) >= LATE_IDS:
            break
    return ids[:LATE_IDS]


def newest_span_id() -> int:
    from dashboard.telemetry.models import SpanRecord

    return SpanRecord.objects.order_by("-id").values_list("id", flat=True).first() or 0


def spans_after(
    span_id: int,
    *,
    gaps: list[int] | None = None,
    filters: SpanFilter | None = None,
    session_id: str | None = None,
) -> list[dict[str, Any]]:
    """Spans stored after ``span_id`` or into one of its ``gaps`` (the newest CATCH_UP_ROWS),
    oldest first."""
    from django.db.models import Q

    from dashboard.telemetry.models import SpanRecord

    spans = SpanRecord.objects.filter(Q(id__gt=span_id) | Q(id__in=gaps or ()))
    if session_id is not None:
        spans = spans.filter(session_id=session_id)
    if filters is not None:
        if filters.session:
            spans = spans.filter(session_id=filters.session)
        if filters.operation:
            spans = spans.filter(name__startswith=filters.operation)
        if filters.errors:
            spans = spans.filter(status="error")
        if filters.slow_ms is not None:
            spans = spans.filter(duration_ms__gte=filters.slow_ms)
    rows = list(spans.order_by("-id")[:CATCH_UP_ROWS])
    return [row.to_dict() for row in reversed(rows)]


def alerts_changed_since(moment: datetime, access: Any = None) -> list[dict[str, Any]]:
    """Alerts raised, bumped, acknowledged or resolved after ``moment``, oldest first."""
    from django.db.models import Q

    from dashboard.telemetry.models import Alert

    changed = Alert.objects.select_related("rule", "acknowledged_by").filter(
        Q(last_seen__gt=moment) | Q(acknowledged_at__gt=moment) | Q(resolved_at__gt=moment)
    )
    if access is not None:
        changed = access.scope(changed)
    rows = list(changed.order_by("-last_seen", "-id")[:CATCH_UP_ROWS])
    return [row.to_dict() for row in reversed(rows)]


def sessions_changed_since(seq: int | None, moment: datetime | None) -> list[str]:
    """Sessions with events after ``seq`` or runs started, stepped or ended after ``moment``,
    the most recently active last (each row moves to the top of the table in turn)."""
    from django.db.models import Q

    from dashboard.eventlog import get_event_log
    from dashboard.runs.models import RunRecord

    ids: list[str] = []
    if seq is not None:
        summaries = get_event_log().sessions(after_seq=seq, limit=CATCH_UP_ROWS)
        ids = [s.session_id for s in reversed(summaries)]
    if moment is not None:
        runs = RunRecord.objects.filter(
            Q(created_at__gt=moment) | Q(started_at__gt=moment) | Q(ended_at__gt=moment)
        ).order_by("created_at", "id")
        for session_id in runs.values_list("session_id", flat=True)[:CATCH_UP_ROWS]:
            if session_id not in ids:
                ids.insert(0, session_id)
    return ids[-CATCH_UP_ROWS:]


def compresses_after(session_id: str, compress_id: int, gaps: list[int] | None = None) -> list[Any]:
    """A session's compress records after ``compress_id`` or in one of its ``gaps``, newest
    first (as the timeline)."""
    from django.db.models import Q

    from dashboard.runs.models import CompressEvent

    rows = CompressEvent.objects.filter(session_id=session_id).filter(
        Q(id__gt=compress_id) | Q(id__in=gaps or ())
    )
    return list(rows.order_by("-id")[:CATCH_UP_ROWS])


def newest_compress_id(session_id: str) -> int:
    from dashboard.runs.models import CompressEvent

    rows = CompressEvent.objects.filter(session_id=session_id).order_by("-id")
    return rows.values_list("id", flat=True).first() or 0


def newer_events(session_id: str, seq: int) -> int:
    """How many of a session's events come after ``seq`` (at most CATCH_UP_ROWS)."""
    from dashboard.eventlog import get_event_log

    return len(get_event_log().session_events(session_id, after_seq=seq, limit=CATCH_UP_ROWS))
