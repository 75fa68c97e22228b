"""The replay lab: pick a session, edit knobs, see the recorded run and the replay side by
side (budget over time, evictions, billed and prefill tokens, regret), save the knobs as a
new tuning profile. Included from ``dashboard/urls.py``; login required, and saving needs the
``save_profile_from_replay`` permission (dashboard/runs/permissions.py).
"""

from __future__ import annotations

from typing import Any, cast
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import path, reverse

from dashboard.console import session_panels
from dashboard.eventlog import get_event_log
from dashboard.projects.access import access_of
from dashboard.runs.inforce import Recorded, load_recorded
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
    "trigger_cap_tokens": "Compress at most at (tokens)",
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


def _get_start(name: str) -> TuningProfile | None:
    """The saved profile the knobs start from ("" or unknown: None, and the recorded one)."""
    if not name:
        return None
    return TuningProfile.objects.filter(name=name).first()


def _knobs(source: Any, start_name: str, base: Profile) -> dict[str, Any]:
    """The knobs to replay: the form's, over those of ``base``. The form says which profile
    its knobs were filled from (``knobs_from``); when another one is chosen since, its knobs
    replace the form's, so the knobs shown are always a profile's or edits of them."""
    if source.get("knobs_from", start_name) != start_name:
        return {f: getattr(base, f) for f in PROFILE_FIELDS}
    return {f: source.get(f, getattr(base, f)) for f in PROFILE_FIELDS}


def _limit(side: dict[str, Any], what: str) -> tuple[str, int]:
    """One side's trigger or C: its legend label (its values) and its height in tokens."""
    size = side["profile"]["context_size"]
    if what == "C":
        return f"C={size:,}", size
    return f"trigger {side['profile']['trigger_ratio']:g} × C={size:,}", side["trigger_tokens"]


def _limit_lines(report: dict[str, Any], whose: dict[str, str]) -> list[dict[str, Any]]:
    """Trigger and C of the recorded run and of the replay, each a dashed line named in the
    legend by its values and whose knobs they are; one line where both sides agree."""
    calls = report["replay"]["per_call"] or report["recorded"]["per_call"]
    x = [calls[0]["call"], calls[-1]["call"]] if calls else [0, 0]
    lines: list[dict[str, Any]] = []
    for what, color in (("trigger", "#c80"), ("C", "#c00")):
        recorded, replayed = _limit(report["recorded"], what), _limit(report["replay"], what)
        if recorded != replayed:
            named = [
                (*recorded, f"recorded: {whose['recorded']}", "dash"),
                (*replayed, f"replay: {whose['replay']}", "dot"),
            ]
        elif whose["recorded"] == whose["replay"]:
            named = [(*replayed, f"recorded and replay: {whose['replay']}", "dash")]
        else:
            owners = f"recorded: {whose['recorded']}; replay: {whose['replay']}"
            named = [(*replayed, owners, "dash")]
        lines += [
            {
                "type": "scatter",
                "mode": "lines",
                "name": f"{label} ({owners})",
                "x": x,
                "y": [y, y],
                "line": {"dash": dash, "color": color, "width": 1.5},
                "hoverinfo": "name",
            }
            for label, y, owners, dash in named
        ]
    return lines


def _budget_figure(report: dict[str, Any], whose: dict[str, str]) -> dict[str, Any]:
    """View and prefill tokens per call, recorded and replayed, under their trigger and C
    (``whose``: the recorded and the replayed knobs' owner, as the legend names them)."""
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
    layout = {
        "height": 440,
        "xaxis": {"title": {"text": "model call"}},
        "yaxis": {"title": {"text": "tokens"}},
        "legend": dict(session_panels.LEGEND_ABOVE),
        "margin": {"t": 30, "r": 10},
    }
    return {"data": traces + _limit_lines(report, whose), "layout": layout}


def _whose(
    recorded: Recorded, start: TuningProfile | None, base: Profile, knobs: Profile
) -> dict[str, str]:
    """Whose trigger and C each side's lines are: the recorded profile (as it ended, when it
    was tuned while the run ran), and the profile the replayed knobs started from (``base``:
    the saved ``start``, else the recorded one), and whether they were edited since."""
    ended = " as it ended" if recorded.changes else ""
    own = f"profile '{recorded.profile_name}'{ended}"
    source = own if start is None else f"saved profile '{start.name}'"
    return {
        "recorded": own,
        "replay": source if knobs == base else f"knobs edited from {source}",
    }


@login_required
def replay_page(request: HttpRequest) -> HttpResponse:
    saving = request.method == "POST" and bool(request.POST.get("save"))
    if saving and not request.user.has_perm(SAVE_PROFILE):
        raise denied(SAVE_PROFILE, "save tuning profiles")
    log = get_event_log()
    sessions = [s.session_id for s in access_of(request).sessions(log.sessions())]
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
    start_name = source.get("start", "")
    start = _get_start(start_name)
    context.update(recorded_profile_name=recorded.profile_name, recorded_changes=recorded.changes)
    if start_name and start is None:
        context["error"] = f"no saved profile {start_name!r}"
        return render(request, "dashboard/replay.html", context, status=400)
    try:
        base = start.to_core() if start is not None else recorded_profile
    except ConfigError as exc:
        context["error"] = f"saved profile {start_name!r}: {exc}"
        return render(request, "dashboard/replay.html", context, status=400)
    knobs = _knobs(source, start_name, base)
    context.update(start=start, knobs=knobs, knob_rows=_knob_rows(knobs))
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
        # Back to the lab, its knobs now from the profile just saved.
        query = urlencode({"session": session_id, "policy": context["policy"], "start": row.name})
        return redirect(f"{reverse('replay')}?{query}")
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
        budget=_budget_figure(report, _whose(recorded, start, base, profile)),
        evictions=_evictions(report),
        nothing_to_check=not report["reproduction"]["checked"]
        and not report["reproduction"]["calls_checked"],
    )
    return render(request, "dashboard/replay.html", context)


urlpatterns = [path("replay/", replay_page, name="replay")]
