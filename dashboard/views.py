from __future__ import annotations

from django.conf import settings
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import render
from django.views.decorators.http import require_GET

from dashboard.eventlog import get_event_log
from scroll_core.eventlog import EventLog, SessionSummary

SEARCH_HITS = 50


def _get_summary(log: EventLog, session_id: str) -> SessionSummary:
    summary = log.session(session_id)
    if summary is None:
        raise Http404("No such session in the Event Log")
    return summary


def _get_cursor(request: HttpRequest, name: str) -> int | None:
    raw = request.GET.get(name, "0").strip() or "0"
    if not raw.isdigit():
        return None
    return int(raw)


def _older_cursor(log: EventLog, session_id: str, first_seq: int, size: int) -> int | None:
    """The ``after`` cursor of the page just before the one that starts at ``first_seq``."""
    older = log.session_events_before(session_id, first_seq, limit=size)
    return older[0].seq - 1 if older else None


@require_GET
def home(request: HttpRequest) -> HttpResponse:
    log = get_event_log()
    page = Paginator(log.sessions(), settings.SCROLL_PAGE_SIZE).get_page(request.GET.get("page"))
    query = request.GET.get("q", "").strip()
    hits = log.search(query, k=SEARCH_HITS) if query else []
    ctx = {"page": page, "query": query, "hits": hits}
    return render(request, "dashboard/home.html", ctx)


@require_GET
def session(request: HttpRequest, session_id: str) -> HttpResponse:
    log = get_event_log()
    summary = _get_summary(log, session_id)
    after = _get_cursor(request, "after")
    if after is None:
        return HttpResponseBadRequest("after must be a non-negative integer seq")

    size = settings.SCROLL_PAGE_SIZE
    events = log.session_events(session_id, after_seq=after, limit=size + 1)
    has_newer = len(events) > size
    events = events[:size]
    first_seq = events[0].seq if events else after + 1
    ctx = {
        "summary": summary,
        "events": events,
        "after": after,
        "last_seq": events[-1].seq if events else None,
        "newer_after": events[-1].seq if has_newer else None,
        "older_after": _older_cursor(log, session_id, first_seq, size),
    }
    # An htmx pager request swaps just the page of rows (STYLE: one template, two uses).
    template = "dashboard/_event_rows.html" if request.htmx else "dashboard/session.html"
    return render(request, template, ctx)
