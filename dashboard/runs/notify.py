"""Tell the console's live pages that a session changed: a run's status, step or profile."""

from __future__ import annotations

from dashboard import groups
from dashboard.push import heard, send_groups
from dashboard.runs.models import RunRecord, TuningProfile

__all__ = ["push_profile_runs", "push_session", "push_sessions"]


def push_session(run: RunRecord) -> None:
    push_sessions([run])


def push_sessions(runs: list[RunRecord]) -> None:
    """``session.changed`` for each run, all in one hop to the server's loop; each profile
    the summaries name read once. A run whose groups no socket can be in
    (``dashboard.push.heard``) costs no summary: a page that opens later reads it back."""
    everyone = [groups.SPANS] if heard(groups.SPANS) else []
    targets = []
    for run in runs:
        own = groups.session_group(run.session_id)
        to = everyone + ([own] if heard(own) else [])
        if to:
            targets.append((run, to))
    wanted = {
        r.profile_id
        for r, _ in targets
        if r.profile_id is not None and not RunRecord.profile.is_cached(r)
    }
    profiles = {p.pk: p for p in TuningProfile.objects.filter(pk__in=wanted)} if wanted else {}
    outbox = []
    for run, to in targets:
        if run.profile_id in profiles:
            run.profile = profiles[run.profile_id]
        summary = run.summary()
        message = {"type": "session.changed", "session_id": run.session_id, "summary": summary}
        outbox += [(group, message) for group in to]
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
