"""The replay lab: pick a session, edit knobs, see the recorded run and the replay side by
side (budget over time, evictions, billed and prefill tokens, regret), save the knobs as a
new tuning profile. Included from ``dashboard/urls.py``; login required, and saving needs the
``save_profile_from_replay`` permission (dashboard/runs/permissions.py).
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
from dashboard.runs.inforce import load_recorded
from dashboard.runs.models import PROFILE_FIELDS, TuningProfile
from dashboard.runs.permissions import SAVE_PROFILE, denied
from scroll_core.errors import ConfigError, ScrollError
from scroll_core.profile import Profile
from scroll_core.replay import POLICIES, Policy, counterfactual

__all__ = ["KNOB_LABELS", "replay_page", "urlpatterns"]

# What an operator reads beside each knob (the field names are for code).
KNOB_LABELS: dict[str, str] = {
    "context_size": "Window C (tokens)",
    "trigger_ratio": "Compress at (share of C)",
    "reserve_ratio": "Protected tail (share of C)",
    "tail_cap_tokens": "Tail at most (tokens)",
    "tail_floor_tokens": "Tail at least (tokens)",
    "tail_floor_ratio": "Tail floor at most (share of C)",
    "protected_recent_tool_results": "Newest results never folded",
    "pre_trim_min_chars": "Fold floor (chars)",
    "tier_cap": "Blocks per index tier",
    "print_cap": "Print cap (chars)",
    "index_budget_ratio": "Index budget (share of C)",
    "output_reserve_cap": "Answer reserve at most (tokens)",
    "output_reserve_ratio": "Answer reserve (share of C)",
    "exec_timeout_s": "Cell timeout (seconds)",
}
_FIGURE_LABELS = {
    "calls": "model calls",
    "billed_prompt_tokens": "billed prompt tokens",
    "prefill_tokens": "prefill tokens (uncached)",
    "evictions": "evictions",
    "folds": "folds",
    "peak_view": "peak view (tokens)",
    "unfit_compresses": "unfit compresses",
}


def _knob_rows(knobs: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "name": f,
            "label": KNOB_LABELS.get(f, f),
            "help": TuningProfile._meta.get_field(f).help_text,
            "value": knobs[f],
        }
        for f in PROFILE_FIELDS
    ]


def _evictions(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The compresses where either side evicted or folded, recorded and replay side by side
    (both replays run the same compress points, in the same order)."""
    rows = []
    pairs = zip(report["recorded"]["compresses"], report["replay"]["compresses"], strict=True)
    for i, (rec, rep) in enumerate(pairs):
        if rec["evicted"] or rec["folds"] or rep["evicted"] or rep["folds"]:
            rows.append({"i": i, "turn": rep["turn"], "step": rep["step"],
                         "reason": rep["reason"], "recorded": rec, "replay": rep})  # fmt: skip
    return rows


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
        "title": {"text": "view tokens per model call (trigger and C dashed)"},
        "height": 320,
        "xaxis": {"title": {"text": "model call"}},
        "yaxis": {"title": {"text": "tokens"}},
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
    try:
        recorded = load_recorded(session_id)
    except ScrollError as exc:
        context["error"] = str(exc)
        return render(request, "dashboard/replay.html", context, status=400)
    recorded_profile = recorded.final
    knobs = {f: source.get(f, getattr(recorded_profile, f)) for f in PROFILE_FIELDS}
    context.update(
        recorded_profile_name=recorded.profile_name,
        recorded_changes=recorded.changes,
        knobs=knobs,
        knob_rows=_knob_rows(knobs),
    )
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
    if not recorded.trace.calls:
        context["error"] = (
            f"Nothing to replay: {session_id} has no model calls (no assistant turns in the "
            "Event Log), so there is no view to rebuild. Replay needs a session with calls: "
            "one the console ran, or an import that includes assistant turns."
        )
        return render(request, "dashboard/replay.html", context)
    policy = cast(Policy, context["policy"] if context["policy"] in POLICIES else "scroll")
    trace = recorded.trace
    trace.notes.extend(recorded.notes)
    try:
        report = counterfactual(
            trace,
            profile,
            policy,
            recorded_profile=recorded_profile,
            recorded_profiles=recorded.profiles,
        )
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
        figures=[(_FIGURE_LABELS[f], report["recorded"][f], report["replay"][f]) for f in figures],
        budget=_budget_figure(report),
        evictions=_evictions(report),
        nothing_to_check=not report["reproduction"]["checked"]
        and not report["reproduction"]["calls_checked"],
    )
    return render(request, "dashboard/replay.html", context)


urlpatterns = [path("replay/", replay_page, name="replay")]
