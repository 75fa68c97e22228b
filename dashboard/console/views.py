"""The console's pages: plain function views, one per URL, every one behind login.

A page and its live fragment share one template: an htmx request (or ``?part=``) renders only
the partial the page includes, so every ``hx-get`` also works as a plain link.
"""

from __future__ import annotations

import functools
import secrets
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import plotly
from django.conf import settings
from django.contrib import messages
from django.contrib.admin.views.decorators import staff_member_required
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import Count
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    JsonResponse,
)
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.cache import cache_control
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from dashboard.console import live, session_live, session_panels
from dashboard.console.inspector_links import call_url_for_span
from dashboard.eventlog import get_event_log
from dashboard.groups import session_safe_id
from dashboard.projects.access import Access, access_of, require_session
from dashboard.projects.models import OPERATOR, AgentOwner
from dashboard.qualify import gate as qualify_gate
from dashboard.runs.grants import grants_for, readers_of
from dashboard.runs.modelinfo import what_will_run
from dashboard.runs.models import KernelAction, KernelState, RunRecord, TuningProfile
from dashboard.runs.notify import push_session
from dashboard.runs.permissions import (
    CONTROL_KERNEL,
    RUN_TASK_CODE,
    START_RUN,
    STOP_RUN,
    denied,
    permission_required,
)
from dashboard.runs.workstate import GATEWAY_OWNER_PREFIX
from dashboard.span_frames import span_row
from dashboard.telemetry import alerts as alert_rules
from dashboard.telemetry.cost import cost_context, recorded_total
from dashboard.telemetry.models import Alert, SpanRecord
from scroll_core.errors import EventNotFound, SandboxUnavailable, SearchTimeout
from scroll_core.store import EventStore, Hit, SessionSummary
from scroll_core.store.schema_common import SQLITE_INT_MAX

SEARCH_HITS = 50
# How deep a console search ranks: beyond it the count reads "200+ hits".
SEARCH_DEPTH = 200
# Spans shown on the traces page and in a session's feed before live rows arrive.
SPAN_ROWS = 100
PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"


@dataclass(frozen=True)
class SessionRow:
    """One line of the sessions table: the Event Log's summary joined with the run."""

    session_id: str
    agent_id: str
    events: int
    tokens: int
    last_at: str
    run: RunRecord | None
    open_alerts: int
    cost: tuple[Decimal | None, str] = (None, "")  # its recorded calls' cost, and currency

    @property
    def safe_id(self) -> str:
        return session_safe_id(self.session_id)


def _get_summary(log: EventStore, session_id: str) -> SessionSummary | None:
    return log.session(session_id)


def _agent_access(summary: SessionSummary | None, access: Access) -> dict[str, Any]:
    """The session's agent, the agents it may read by grant, and every grant it was given
    (those naming agents of projects the user does not read left out)."""
    agent = summary.agent_id if summary else None
    grants = [g for g in grants_for(agent) if access.sees_agent(g.readable_agent)] if agent else []
    readable = sorted({g.readable_agent for g in grants if g.live})
    return {
        "agent_id": agent,
        "agent_grants": grants,
        "readable_agents": readable,
        "reader_agents": [a for a in readers_of(agent) if access.sees_agent(a)] if agent else [],
    }


def _get_cursor(request: HttpRequest, name: str) -> int | None:
    raw = request.GET.get(name, "0").strip() or "0"
    if not (raw.isascii() and raw.isdigit()):
        return None
    if int(raw) > SQLITE_INT_MAX:
        raise Http404(f"{name}={raw} is beyond any seq")
    return int(raw)


def _get_page(request: HttpRequest, name: str) -> int:
    """A 1-based page number from the query string; 1 when absent, 404 when malformed."""
    raw = request.GET.get(name, "1").strip() or "1"
    if not (raw.isascii() and raw.isdigit()) or not 0 < int(raw) <= 10**6:
        raise Http404(f"{name}={raw} is no page")
    return int(raw)


def _get_profile(raw: str | None) -> TuningProfile | None:
    """The profile a form names; None when it names none, 404 when it names no profile."""
    if not raw:
        return None
    if not (raw.isascii() and raw.isdigit()) or int(raw) > SQLITE_INT_MAX:
        raise Http404("No such profile")
    return get_object_or_404(TuningProfile, pk=int(raw))


@dataclass(frozen=True)
class SearchPage:
    """One page of console search hits: SEARCH_HITS a page, and whether more follow."""

    hits: list[Hit]
    page: int
    has_next: bool
    error: str | None = None
    # Hits follow this page (past SEARCH_DEPTH too, where no page shows them).
    more: bool = False

    @property
    def first(self) -> int:
        return (self.page - 1) * SEARCH_HITS + 1

    @property
    def last(self) -> int:
        return self.first + len(self.hits) - 1

    @property
    def count_label(self) -> str:
        """The true count when every hit is known, else "N+ hits" (the search stopped)."""
        seen = self.first - 1 + len(self.hits)
        if self.more:
            return f"{seen}+ hits"
        return "1 hit" if seen == 1 else f"{seen} hits"


def _search(log: EventStore, query: str, page: int = 1, **filters: Any) -> SearchPage:
    """A console search under the console's time limit: one page of hits, or what to tell
    the user; ``has_next`` when hits follow the page (at most SEARCH_DEPTH are ranked)."""
    if not query:
        return SearchPage([], page, False)
    limit = settings.SCROLL_CONSOLE_SEARCH_TIMEOUT_S
    upto = page * SEARCH_HITS
    if upto > SEARCH_DEPTH:
        raise Http404(f"hits={page} is past the {SEARCH_DEPTH} hits a search shows")
    try:
        # Every page ranks the same SEARCH_DEPTH hits (the ranking depends on how many are
        # asked for), so pages never repeat or skip a hit.
        found = log.search(query, k=SEARCH_DEPTH + 1, time_limit_s=limit, **filters)
    except SearchTimeout:
        return SearchPage(
            [],
            page,
            False,
            f"The search took longer than {limit:g} s and was stopped. Narrow it: use fewer "
            "or rarer words, or search within one session.",
        )
    more = len(found) > upto
    return SearchPage(
        found[upto - SEARCH_HITS : upto], page, more and upto < SEARCH_DEPTH, more=more
    )


def _older_cursor(log: EventStore, session_id: str, first_seq: int, size: int) -> int | None:
    """The ``after`` cursor of the page just before the one that starts at ``first_seq``."""
    older = log.session_events_before(session_id, first_seq, limit=size)
    return older[0].seq - 1 if older else None


def _open_alerts_by_session() -> dict[str, int]:
    rows = Alert.objects.filter(state=Alert.OPEN).values("session_id").annotate(n=Count("id"))
    return {row["session_id"]: row["n"] for row in rows}


def session_row(log: EventStore, session_id: str) -> SessionRow:
    """The sessions-table row of one session (the consumers render live rows with it)."""
    summary = log.session(session_id)
    run = RunRecord.objects.select_related("profile").filter(session_id=session_id).first()
    return SessionRow(
        session_id=session_id,
        agent_id=summary.agent_id if summary else "",
        events=summary.events if summary else 0,
        tokens=summary.tokens if summary else 0,
        last_at=summary.last_at if summary else "",
        run=run,
        open_alerts=Alert.objects.filter(state=Alert.OPEN, session_id=session_id).count(),
        cost=recorded_total(session_id),
    )


@require_GET
@cache_control(max_age=86400, public=True)
def plotly_js(request: HttpRequest) -> HttpResponse:
    """Plotly's bundle from the installed package: no CDN, no network.

    Read once and sent whole: a FileResponse streams a synchronous iterator, which the ASGI
    handler can only consume with a warning.
    """
    return HttpResponse(_plotly_bundle(), content_type="text/javascript")


@functools.cache
def _plotly_bundle() -> bytes:
    return PLOTLY_JS.read_bytes()


@login_required
@require_GET
def home(request: HttpRequest) -> HttpResponse:
    log = get_event_log()
    # The cursor first: whatever is written after it reaches the page over its socket.
    ws_url = live.ws_url(
        "/ws/feed/", spans=0, seq_after=log.last_seq(), runs_after=live.now_cursor()
    )
    access = access_of(request)
    page = Paginator(access.sessions(log.sessions()), settings.SCROLL_PAGE_SIZE).get_page(
        request.GET.get("page")
    )
    ids = [s.session_id for s in page.object_list]
    runs = {r.session_id: r for r in access.scope(RunRecord.objects.select_related("profile"))}
    alerts = _open_alerts_by_session()
    rows = [
        SessionRow(
            s.session_id,
            s.agent_id,
            s.events,
            s.tokens,
            s.last_at,
            runs.get(s.session_id),
            alerts.get(s.session_id, 0),
            recorded_total(s.session_id),
        )
        for s in page.object_list
    ]
    # Runs that have not written an event yet still belong in the table.
    waiting = [
        SessionRow(r.session_id, "", 0, 0, "", r, alerts.get(r.session_id, 0))
        for r in runs.values()
        if r.active and r.session_id not in ids and log.session(r.session_id) is None
    ]
    query = request.GET.get("q", "").strip()
    search = _search(log, query, _get_page(request, "hits"), agent_id=access.agents())
    if not query and page.number == 1:
        ws_url += "&sessions=1"
    ctx = {
        "page": page,
        "rows": waiting + rows,
        "query": query,
        "search": search,
        "hits": search.hits,
        "search_error": search.error,
        "ws_url": ws_url,
    }
    return render(request, "dashboard/home.html", ctx)


@login_required
@require_GET
def session(request: HttpRequest, session_id: str) -> HttpResponse:
    require_session(request, session_id)
    log = get_event_log()
    summary = _get_summary(log, session_id)
    run = RunRecord.objects.select_related("profile").filter(session_id=session_id).first()
    if summary is None and run is None:
        raise Http404("No such session in the Event Log")
    after = _get_cursor(request, "after")
    if after is None:
        return HttpResponseBadRequest("after must be a non-negative integer seq")

    size = settings.SCROLL_PAGE_SIZE
    span_after = live.newest_span_id()
    events = log.session_events(session_id, after_seq=after, limit=size + 1)
    has_newer = len(events) > size
    events = events[:size]
    first_seq = events[0].seq if events else after + 1
    query = request.GET.get("q", "").strip()
    search = _search(log, query, _get_page(request, "hits"), session_id=session_id)
    last_seq = events[-1].seq if events else None
    timeline = session_live.timeline_page(
        session_id,
        run,
        page=_get_page(request, "timeline"),
        show_none=request.GET.get("none") == "1",
    )
    ctx = session_live.parts_context(session_id) | {
        "ws_url": live.ws_url(
            f"/ws/sessions/{session_safe_id(session_id)}/",
            session=session_id,
            span_after=span_after,
            span_gaps=live.id_gaps(SpanRecord, span_after),
            # Only the newest timeline page takes live entries.
            compress_after=timeline.compress_after if timeline.page == 1 else None,
            change_after=timeline.change_after if timeline.page == 1 else None,
            action_after=timeline.action_after if timeline.page == 1 else None,
            calls_after=session_live.recorded_calls(session_id),
            none="1" if timeline.show_none else None,
            # Only the newest page learns of newer events (its "newer" link appears).
            seq_after=(last_seq or after) if not has_newer else None,
        ),
        "safe_id": session_safe_id(session_id),
        "events": events,
        "after": after,
        "last_seq": last_seq,
        "newer_after": events[-1].seq if has_newer else None,
        "older_after": _older_cursor(log, session_id, first_seq, size),
        "query": query,
        "search": search,
        "hits": search.hits,
        "search_error": search.error,
        "timeline": timeline,
        "can_stop": request.user.has_perm(STOP_RUN)
        and access_of(request).sees_session(session_id, OPERATOR),
        "spans": [
            span_row(s.to_dict())
            for s in SpanRecord.objects.filter(session_id=session_id)[:SPAN_ROWS]
        ],
    }
    ctx.update(_agent_access(summary, access_of(request)))
    if request.GET.get("part") != "charts" and not request.htmx:
        ctx.update(cost_context(session_id))  # issue 11: cost and the prefix-cache arithmetic
    # The live parts: ?part=charts after a compress; an htmx pager request swaps the rows.
    if request.GET.get("part") == "charts":
        return JsonResponse({"budget": ctx["budget"], "retrievals": ctx["retrieval_chart"]})
    template = "dashboard/_event_rows.html" if request.htmx else "dashboard/session.html"
    return render(request, template, ctx)


@login_required
@require_GET
def event(request: HttpRequest, seq: int) -> HttpResponse:
    """One event whole (inline expand on the session page; a page of its own otherwise)."""
    try:
        found = get_event_log().get(seq)
    except EventNotFound:
        raise Http404("No such event") from None
    if not access_of(request).sees_agent(found.agent_id):
        raise Http404("No such event")
    payload_text = None
    if found.payload is not None:
        try:
            loaded = found.payload.load()
            payload_text = loaded if isinstance(loaded, str) else repr(loaded)
        except Exception as exc:  # a missing or corrupt payload is shown, not raised
            payload_text = f"(payload unavailable: {exc})"
    ctx = {"e": found, "payload_text": payload_text, "ws_url": live.ws_url("/ws/alerts/")}
    template = "dashboard/_event_full.html" if request.htmx else "dashboard/event.html"
    return render(request, template, ctx)


@login_required
@require_GET
def traces(request: HttpRequest) -> HttpResponse:
    filters = live.SpanFilter.from_query(request.GET)
    span_after = live.newest_span_id()
    access = access_of(request)
    spans = access.scope(SpanRecord.objects.all())
    if filters.session:
        spans = spans.filter(session_id=filters.session)
    if filters.operation:
        spans = spans.filter(name__startswith=filters.operation)
    if filters.errors:
        spans = spans.filter(status="error")
    if filters.slow_ms is not None:
        spans = spans.filter(duration_ms__gte=filters.slow_ms)
    ctx = {
        "filters": filters,
        "ws_url": live.ws_url(
            "/ws/feed/",
            **filters.params(),
            span_after=span_after,
            span_gaps=live.id_gaps(SpanRecord, span_after),
        ),
        "spans": [span_row(s.to_dict()) for s in spans[:SPAN_ROWS]],
        "operations": access.scope(SpanRecord.objects.all())
        .values_list("name", flat=True)
        .distinct()[:200],
    }
    template = "dashboard/_span_table.html" if request.htmx else "dashboard/traces.html"
    return render(request, template, ctx)


@login_required
@require_GET
def span(request: HttpRequest, span_id: str) -> HttpResponse:
    record = get_object_or_404(SpanRecord, span_id=span_id)
    require_session(request, record.session_id)
    access = access_of(request)
    ctx = {
        "ws_url": live.ws_url("/ws/alerts/"),
        "span": record,
        "s": span_row(record.to_dict()),
        "parent": access.scope(SpanRecord.objects.filter(span_id=record.parent_id)).first(),
        "children": access.scope(SpanRecord.objects.filter(parent_id=record.span_id)).order_by(
            "start_ns"
        ),
        "attributes": sorted(record.attributes.items()),
        "grafana_url": _grafana_trace_url(record.trace_id),
        "call_url": call_url_for_span(record),
    }
    return render(request, "dashboard/span.html", ctx)


def _grafana_trace_url(trace_id: str) -> str | None:
    base = settings.SCROLL_GRAFANA_URL
    if not base:
        return None
    return f"{base}/explore?schemaVersion=1&panes=" + _tempo_pane(trace_id)


def _tempo_pane(trace_id: str) -> str:
    import json
    from urllib.parse import quote

    pane = {
        "t": {
            "datasource": "tempo",
            "queries": [
                {
                    "refId": "A",
                    "datasource": {"type": "tempo"},
                    "queryType": "traceql",
                    "query": trace_id,
                }
            ],
            "range": {"from": "now-24h", "to": "now"},
        }
    }
    return quote(json.dumps(pane, separators=(",", ":")))


@login_required
@require_GET
def alerts(request: HttpRequest) -> HttpResponse:
    rows = access_of(request).scope(Alert.objects.select_related("rule", "acknowledged_by"))
    ctx = {
        "ws_url": live.ws_url("/ws/alerts/"),
        "open": rows.filter(state=Alert.OPEN)[:200],
        "acknowledged": rows.filter(state=Alert.ACKNOWLEDGED)[:200],
        "resolved": rows.filter(state=Alert.RESOLVED)[:50],
    }
    return render(request, "dashboard/alerts.html", ctx)


@login_required
@require_POST
def alert_acknowledge(request: HttpRequest, alert_id: int) -> HttpResponse:
    alert = get_object_or_404(Alert, pk=alert_id)
    require_session(request, alert.session_id, OPERATOR)
    alert_rules.acknowledge(alert, request.user)
    return redirect("alerts")


@login_required
@require_POST
def alert_resolve(request: HttpRequest, alert_id: int) -> HttpResponse:
    alert = get_object_or_404(Alert, pk=alert_id)
    require_session(request, alert.session_id, OPERATOR)
    alert_rules.resolve(alert, request.user)
    return redirect("alerts")


@login_required
@require_GET
def kernels(request: HttpRequest) -> HttpResponse:
    ctx = kernel_rows_context(request.user, access_of(request)) | {
        "ws_url": live.ws_url("/ws/feed/", spans=0, kernels=1)
    }
    return render(request, "dashboard/kernels.html", ctx)


def kernel_rows_context(user: Any, access: Access) -> dict[str, Any]:
    """What the Kernels table shows a user (the page and its socket's frames): the kernels
    of their projects' sessions; the controls where they may operate."""
    can_control = bool(user is not None and user.has_perm(CONTROL_KERNEL))
    rows = access.visible(session_panels.kernels())
    for row in rows:
        row["can_control"] = can_control and access.sees_session(row["session_id"], OPERATOR)
    return {"kernels": rows, "can_control": can_control}


# Console actions, answered by the worker that owns the session's run (dashboard.runs.worker).
KERNEL_ACTIONS = {
    "restart": "restart_kernel",
    "stop": "stop_kernel",
    "status": "kernel_status",
    "digest": "digest",
}


# An operator's restart or stop is recorded on the session's timeline (who, when, what).
AUDITED_KERNEL_ACTIONS = frozenset({KernelAction.RESTART, KernelAction.STOP})


def _audit_kernel_action(request: HttpRequest, action: str, session_id: str, answer: Any) -> None:
    KernelAction.objects.create(
        session_id=session_id,
        action=action,
        operator=request.user.get_username(),
        done=answer.ok,
        detail=(f"by worker {answer.worker}" if answer.ok else answer.error)[:400],
    )
    run = RunRecord.objects.select_related("profile").filter(session_id=session_id).first()
    if run is not None:
        push_session(run)  # an open session page shows the entry at once


@login_required
@permission_required(CONTROL_KERNEL, "restart or stop kernels")
@require_POST
def kernel_action(request: HttpRequest, action: str, session_id: str) -> HttpResponse:
    from dashboard.runs.worker_commands import send

    if action not in KERNEL_ACTIONS:
        raise Http404("No such kernel action")
    require_session(request, session_id, OPERATOR)
    state = KernelState.objects.filter(session_id=session_id).only("worker").first()
    if state is not None and state.gateway:
        messages.error(
            request,
            f"Kernel of {session_id}: {action} not done: it is driven by the gateway in web "
            f"process {state.worker.removeprefix(GATEWAY_OWNER_PREFIX)}, not by a run worker, "
            "so console actions do not apply to it (it restarts empty when another web "
            "process takes its session over).",
        )
        return redirect("kernels")
    answer = send(session_id, KERNEL_ACTIONS[action])
    if action in AUDITED_KERNEL_ACTIONS:
        _audit_kernel_action(request, action, session_id, answer)
    if not answer.ok:
        messages.error(request, f"Kernel of {session_id}: {action} not done: {answer.error}")
    elif action == "digest":
        messages.success(request, f"Namespace of {session_id}: {answer.data.get('digest') or '-'}")
    elif action == "status":
        data = answer.data
        messages.success(
            request,
            f"Kernel of {session_id}: {'alive' if data.get('alive') else 'stopped'}, "
            f"{data.get('cells', 0)} cells, {data.get('restarts', 0)} restarts "
            f"(worker {answer.worker}).",
        )
    else:
        messages.success(request, f"Kernel of {session_id}: {action} done by {answer.worker}.")
    return redirect("kernels")


def _known_agents(access: Access) -> list[str]:
    """Agents a run may continue: every agent with a session in the Event Log of a project
    where the user is an operator."""
    agents = {s.agent_id for s in get_event_log().sessions() if s.agent_id}
    return sorted(a for a in agents if access.sees_agent(a, OPERATOR))


def _run_agent(request: HttpRequest, access: Access) -> tuple[str | None, str]:
    """The agent a new run writes as: the one the form continues, else a fresh agent put in
    the project the form names (before the run exists, so no page of another project ever
    shows it); None and why not when the user may not run there."""
    agent = request.POST.get("agent", "").strip()
    if agent:
        if agent not in _known_agents(access):
            return None, f"No agent {agent!r} in the Event Log to continue."
        return agent, ""
    projects = access.projects(OPERATOR)
    raw = request.POST.get("project", "").strip()
    chosen = next((p for p in projects if str(p.pk) == raw), None) if raw else None
    if chosen is None and raw:
        return None, "You are not an operator of that project."
    if chosen is None:
        if not projects:
            return None, "You are an operator of no project: ask a project admin for the role."
        chosen = projects[0]
    fresh = f"run-{secrets.token_hex(6)}"
    AgentOwner.objects.create(agent_id=fresh, project=chosen)
    return fresh, ""


def _start_run(request: HttpRequest, runner: Any) -> tuple[RunRecord | None, str]:
    """Start the run the Runs form asks for; the run, or None and why not."""
    task = request.POST.get("task", "").strip()
    profile = _get_profile(request.POST.get("profile", "").strip())
    model = request.POST.get("model", "").strip()
    if not task or profile is None:
        return None, "A run needs a task and a profile."
    agent, why = _run_agent(request, access_of(request))
    if agent is None:
        return None, why
    if not hasattr(runner, "start_run"):
        return None, "This console has no runner."
    # A profile that requires qualified models gates the run's model as it gates a gateway
    # key's (Scroll's own loop speaks the OpenAI format); refused or warned, it is audited.
    verdict = qualify_gate.evaluate(profile, [model or runner.POLICY_NAME], "openai")
    if verdict.refused:
        qualify_gate.record(verdict, subject="console run", user=request.user)
        return None, f"Not started: {verdict.message}"
    try:
        run = runner.start_run(
            task=task,
            profile=profile,
            model=model or None,
            user=request.user,
            agent_id=agent,
            task_code=request.user.has_perm(RUN_TASK_CODE),
        )
    except SandboxUnavailable as exc:
        return None, f"Not started: {exc}"
    except ValueError as exc:  # a task of only "---" lines has no turn to run
        return None, f"Not started: {exc} (a line of only --- splits the task into turns)."
    if qualify_gate.record(verdict, subject=f"run {run.session_id}", user=request.user) and (
        verdict.missing
    ):
        messages.warning(request, f"Started with a warning: {verdict.message}")
    return run, ""


@login_required
@require_http_methods(["GET", "POST"])
def runs(request: HttpRequest) -> HttpResponse:
    runner = session_panels.runner_module()
    status = 200
    if request.method == "POST":
        if not request.user.has_perm(START_RUN):
            raise denied(START_RUN, "start runs")
        run, error = _start_run(request, runner)
        if run is not None:
            messages.success(request, f"Started {run.session_id} as agent {run.agent_id}.")
            return redirect("session", run.session_id)
        messages.error(request, error)
        status = 400
    access = access_of(request)
    ctx = {
        "ws_url": live.ws_url("/ws/feed/", spans=0, runs=1, runs_after=live.now_cursor()),
        "runs": access.scope(RunRecord.objects.select_related("profile"))[:100],
        "can_stop": request.user.has_perm(STOP_RUN),
        "profiles": TuningProfile.objects.all(),
        "models": getattr(runner, "available_models", lambda: [])(),
        "agents": _known_agents(access) if request.user.has_perm(START_RUN) else [],
        "projects": access.projects(OPERATOR) if request.user.has_perm(START_RUN) else [],
        "model_info": what_will_run(),
    }
    return render(request, "dashboard/runs.html", ctx, status=status)


@login_required
@permission_required(STOP_RUN, "stop runs")
@require_POST
def run_stop(request: HttpRequest, session_id: str) -> HttpResponse:
    run = get_object_or_404(RunRecord, session_id=session_id)
    require_session(request, session_id, OPERATOR)
    answer = session_panels.runner_module().stop_run(session_id)
    if answer.ok:
        messages.success(request, f"Stop requested for {session_id}: it stops after this step.")
    else:
        messages.error(request, f"{session_id} was not stopped ({run.status}): {answer.error}")
    return redirect("session", session_id)


def _loopback(request: HttpRequest) -> bool:
    return request.META.get("REMOTE_ADDR") in {"127.0.0.1", "::1"}


@staff_member_required
@require_http_methods(["GET", "POST"])
def bench_load(request: HttpRequest, load_id: int | None = None) -> HttpResponse:
    """bench/console.py's span load (only routed with SCROLL_BENCH=1; loopback, staff)."""

    from dashboard.console import benchload
    from dashboard.telemetry.spans import get_sink

    if not settings.SCROLL_BENCH or not _loopback(request):
        raise Http404("No bench here")
    if request.method == "POST":
        try:
            load = benchload.start_load(
                int(request.POST.get("sessions", "1")),
                float(request.POST.get("rate", "1")),
                float(request.POST.get("seconds", "1")),
                mode=request.POST.get("mode", "scroll"),
            )
        except (ValueError, RuntimeError) as exc:
            return JsonResponse({"error": str(exc)}, status=400)
        return JsonResponse(load.to_dict(), status=202)
    found = benchload.get_load(load_id or 0)
    if found is None:
        raise Http404("No such load")
    load = found
    sink = get_sink()
    return JsonResponse(load.to_dict() | {"sink": sink.stats() if sink else None})
