"""The Qualify pages: the scorecards, one scorecard (its live fragment polls while the suite
runs), two side by side, and the form that starts a qualification, which needs the
``start_run`` permission (running code is a permission, not a login). Included from
``dashboard/urls.py``."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import path
from django.views.decorators.http import require_GET, require_POST

from dashboard.eventlog import get_event_log
from dashboard.projects.access import require_session
from dashboard.runs.models import TuningProfile
from dashboard.runs.permissions import START_RUN, permission_required
from dashboard.telemetry.lint_alerts import LINT_KINDS
from dashboard.telemetry.models import Alert
from scroll_core.errors import ConfigError
from scroll_core.lint import RULE_NAMES, lint_session
from scroll_core.models.policy import POLICY_NAME
from scroll_core.qualify import APIS, CATEGORIES, Scorecard

from . import service
from .models import Qualification

__all__ = ["urlpatterns"]


def _get_qualification(pk: int) -> Qualification:
    return get_object_or_404(Qualification, pk=pk)


@login_required
@require_GET
def qualifications(request: HttpRequest) -> HttpResponse:
    rows = Qualification.objects.all()[:200]
    ctx = {
        "rows": rows,
        "categories": CATEGORIES,
        "apis": APIS,
        "baseline": POLICY_NAME,
        "profiles": TuningProfile.objects.all(),
    }
    return render(request, "dashboard/qualify.html", ctx)


@login_required
@permission_required(START_RUN, "start a qualification")
@require_POST
def qualify_start(request: HttpRequest) -> HttpResponse:
    try:
        qualification = service.create(
            model=request.POST.get("model", ""),
            upstream=request.POST.get("upstream", ""),
            api=request.POST.get("api", "openai"),
            key_env=request.POST.get("key_env", "").strip(),
            profile=request.POST.get("profile", ""),
            user=request.user,
        )
    except ConfigError as exc:
        messages.error(request, f"Not started: {exc}")
        return redirect("qualifications")
    if settings.SCROLL_WORKERS == "embedded":
        service.start_in_background(qualification)
        messages.success(request, f"Qualifying {qualification.model_name} (#{qualification.pk}).")
    else:  # external workers: `manage.py scroll_qualify --queued` runs it
        messages.success(request, f"Queued #{qualification.pk} for `scroll_qualify --queued`.")
    return redirect("qualification", qualification.pk)


@login_required
@require_GET
def qualification(request: HttpRequest, pk: int) -> HttpResponse:
    q = _get_qualification(pk)
    others = Qualification.objects.filter(status=Qualification.DONE).exclude(pk=pk)[:50]
    return render(request, "dashboard/qualification.html", {"q": q, "others": others})


@login_required
@require_GET
def qualification_card(request: HttpRequest, pk: int) -> HttpResponse:
    """The scorecard fragment alone (polled while the suite runs)."""
    return render(request, "dashboard/_qualify_card.html", {"q": _get_qualification(pk)})


def _compare_rows(a: Scorecard, b: Scorecard) -> list[dict[str, Any]]:
    """One row per item of either scorecard, in suite order (an item a suite version lacks
    shows as missing on that side)."""
    ids = [i.id for i in a.items] + [i.id for i in b.items if i.id not in {x.id for x in a.items}]
    by_a, by_b = {i.id: i for i in a.items}, {i.id: i for i in b.items}
    return [
        {
            "id": item_id,
            "a": by_a.get(item_id),
            "b": by_b.get(item_id),
            "differs": (by_a.get(item_id) is None)
            or (by_b.get(item_id) is None)
            or by_a[item_id].passed != by_b[item_id].passed,
        }
        for item_id in ids
    ]


@login_required
@require_GET
def qualify_compare(request: HttpRequest) -> HttpResponse:
    try:
        pk_a, pk_b = int(request.GET.get("a", "")), int(request.GET.get("b", ""))
    except ValueError:
        messages.error(request, "Pick two scorecards to compare.")
        return redirect("qualifications")
    qa, qb = _get_qualification(pk_a), _get_qualification(pk_b)
    a, b = qa.card, qb.card
    if a is None or b is None:
        messages.error(request, "Only finished qualifications have a scorecard to compare.")
        return redirect("qualifications")
    categories = [
        {"name": name, "a": a.category(name), "b": b.category(name)} for name in CATEGORIES
    ]
    ctx = {
        "qa": qa, "qb": qb, "a": a, "b": b, "rows": _compare_rows(a, b),
        "categories": categories, "same_suite": a.suite_version == b.suite_version,
    }  # fmt: skip
    return render(request, "dashboard/qualify_compare.html", ctx)


@login_required
@require_GET
def session_lint(request: HttpRequest, session_id: str) -> HttpResponse:
    """The lint rules' flags for one recorded session (the session page loads it), each with
    the alert the live lint raised for it, when it did (``dashboard.telemetry.lint_alerts``)."""
    require_session(request, session_id)
    log = get_event_log()
    if log.session(session_id) is None:
        raise Http404(f"no session {session_id!r} in the Event Log")
    flags = lint_session(log, session_id)
    alerts = {
        (a.rule.kind, a.key): a
        for a in Alert.objects.filter(
            session_id=session_id, rule__kind__in=LINT_KINDS.values()
        ).select_related("rule")
    }
    rows = [(f, alerts.get((LINT_KINDS.get(f.rule, ""), str(f.cell_seq)))) for f in flags]
    ctx = {"session_id": session_id, "rows": rows, "rules": list(RULE_NAMES)}
    return render(request, "dashboard/_session_lint.html", ctx)


urlpatterns = [
    path("qualify/", qualifications, name="qualifications"),
    path("qualify/start/", qualify_start, name="qualify_start"),
    path("qualify/compare/", qualify_compare, name="qualify_compare"),
    path("qualify/<int:pk>/", qualification, name="qualification"),
    path("qualify/<int:pk>/card/", qualification_card, name="qualification_card"),
    # Not under sessions/: the session page's <path:> would swallow it.
    path("lint/sessions/<path:session_id>/", session_lint, name="session_lint"),
]
