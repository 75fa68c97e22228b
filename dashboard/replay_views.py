"""The replay lab: pick a session, edit knobs, see the recorded run and the replay side by
side (budget over time, evictions, billed and prefill tokens, regret), save the knobs as a
new tuning profile. Included from ``dashboard/urls.py``; login required, and saving needs the
``save_profile_from_replay`` permission (dashboard/permissions.py).
"""

from __future__ import annotations

from typing import Any, cast

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import path, reverse

from dashboard.eventlog import get_event_log
from dashboard.management.commands.scroll_replay import recorded_compresses
from dashboard.models import PROFILE_FIELDS, RunRecord, TuningProfile
from dashboard.permissions import SAVE_PROFILE, denied
from scroll_core.errors import ConfigError, ScrollError
from scroll_core.profile import Profile
from scroll_core.replay import POLICIES, Policy, TraceError, counterfactual, load_trace

__all__ = ["replay_page", "urlpatterns"]


def _recorded_profile(session_id: str) -> tuple[str, Profile]:
    run = RunRecord.objects.filter(session_id=session_id).select_related("profile").first()
    row = run.profile if run is not None and run.profile else TuningProfile.get_default()
    return row.name, row.to_core()


def _budget_figure(report: dict[str, Any]) -> dict[str, Any]:
    traces = []
    for side, dash in (("recorded", "solid"), ("replay", "dot")):
        calls = report[side]["per_call"]
        traces.append(
            {
                "type": "scatter",
                "mode": "lines+markers",
                "name": f"{side} view",
                "x": [c["call"] for c in calls],
                "y": [c["total"] for c in calls],
                "line": {"dash": dash},
            }
        )
        traces.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": f"{side} prefill",
                "x": [c["call"] for c in calls],
                "y": [c["prefill"] for c in calls],
                "line": {"dash": dash, "width": 1},
            }
        )
    shapes = [
        {
            "type": "line",
            "xref": "paper",
            "x0": 0,
            "x1": 1,
            "y0": y,
            "y1": y,
            "line": {"dash": "dash", "color": color},
        }
        for y, color in (
            (report["replay"]["trigger_tokens"], "#c80"),
            (report["replay"]["context_size"], "#c00"),
        )
    ]
    layout = {
        "title": "view tokens per model call (trigger and C dashed)",
        "height": 320,
        "xaxis": {"title": "model call"},
        "yaxis": {"title": "tokens"},
        "shapes": shapes,
        "margin": {"t": 40, "r": 10},
    }
    return {"data": traces, "layout": layout}


@login_required
def replay_page(request: HttpRequest) -> HttpResponse:
    saving = request.method == "POST" and bool(request.POST.get("save"))
    if saving and not request.user.has_perm(SAVE_PROFILE):
        raise denied(SAVE_PROFILE, "save tuning profiles")
    log = get_event_log()
    sessions = [s.session_id for s in log.sessions()]
    session_id = request.POST.get("session") or request.GET.get("session") or ""
    source = request.POST if request.method == "POST" else request.GET
    context: dict[str, Any] = {
        "sessions": sessions,
        "session_id": session_id,
        "policies": POLICIES,
        "policy": source.get("policy", "scroll"),
        "profiles": TuningProfile.objects.all(),
    }
    if not session_id:
        return render(request, "dashboard/replay.html", context)
    if session_id not in sessions:
        context["error"] = f"no session {session_id!r} in the Event Log"
        return render(request, "dashboard/replay.html", context, status=404)
    name, recorded_profile = _recorded_profile(session_id)
    knobs = {f: source.get(f, getattr(recorded_profile, f)) for f in PROFILE_FIELDS}
    context.update(recorded_profile_name=name, knobs=knobs)
    try:
        profile = Profile.from_mapping(knobs)
    except ConfigError as exc:
        context["error"] = str(exc)
        return render(request, "dashboard/replay.html", context, status=400)
    if saving:
        row = TuningProfile(
            name=request.POST.get("name", "").strip(),
            description=f"saved from the replay lab ({session_id})"[:200],
            **profile.to_dict(),
        )
        try:
            row.full_clean()
        except ValidationError as exc:
            context["error"] = "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())
            return render(request, "dashboard/replay.html", context, status=400)
        row.save()
        messages.success(request, f"saved profile {row.name!r}")
        return redirect(f"{reverse('replay')}?session={session_id}&policy={context['policy']}")
    policy = cast(Policy, context["policy"] if context["policy"] in POLICIES else "scroll")
    rows = recorded_compresses(session_id)
    try:
        try:
            trace = load_trace(log, session_id, compresses=rows or None)
        except TraceError:
            trace = load_trace(log, session_id)
        report = counterfactual(trace, profile, policy, recorded_profile=recorded_profile)
    except ScrollError as exc:
        context["error"] = str(exc)
        return render(request, "dashboard/replay.html", context, status=400)
    figures = (
        "calls",
        "billed_prompt_tokens",
        "prefill_tokens",
        "evictions",
        "folds",
        "peak_view",
        "unfit_compresses",
    )
    context.update(
        report=report,
        figures=[(f, report["recorded"][f], report["replay"][f]) for f in figures],
        budget=_budget_figure(report),
    )
    return render(request, "dashboard/replay.html", context)


urlpatterns = [path("replay/", replay_page, name="replay")]
