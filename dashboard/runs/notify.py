"""Tell the console's live pages that a session changed: a run's status, step or profile."""

from __future__ import annotations

from dashboard import groups
from dashboard.push import send_groups
from dashboard.runs.models import RunRecord, TuningProfile

__all__ = ["push_profile_runs", "push_session", "push_sessions"]


def push_session(run: RunRecord) -> None:
    push_sessions([run])


def push_sessions(runs: list[RunRecord]) -> None:
    """``session.changed`` for each run, all in one hop to the server's loop; each profile
    the summaries name read once."""
    wanted = {
        r.profile_id
        for r in runs
        if r.profile_id is not None and not RunRecord.profile.is_cached(r)
    }
    profiles = {p.pk: p for p in TuningProfile.objects.filter(pk__in=wanted)} if wanted else {}
    outbox = []
    for run in runs:
        if run.profile_id in profiles:
            run.profile = profiles[run.profile_id]
        summary = run.summary()
        message = {"type": "session.changed", "session_id": run.session_id, "summary": summary}
        outbox += [(groups.SPANS, message), (groups.session_group(run.session_id), message)]
    if outbox:
        send_groups(outbox)


def push_profile_runs(profile_id: int) -> None:
    """A profile was edited: each active run on it re-sends its session (the timeline shows
    the change as soon as it is saved, not at the run's next step)."""
    active = RunRecord.objects.select_related("profile").filter(
        profile_id=profile_id, status__in=RunRecord.ACTIVE
    )
    for run in active:
        push_session(run)
