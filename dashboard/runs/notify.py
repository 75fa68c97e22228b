"""Tell the console's live pages that a session changed: a run's status, step or profile."""

from __future__ import annotations

from dashboard import groups
from dashboard.push import send_groups
from dashboard.runs.models import RunRecord

__all__ = ["push_profile_runs", "push_session"]


def push_session(run: RunRecord) -> None:
    message = {"type": "session.changed", "session_id": run.session_id, "summary": run.summary()}
    send_groups([(groups.SPANS, message), (groups.session_group(run.session_id), message)])


def push_profile_runs(profile_id: int) -> None:
    """A profile was edited: each active run on it re-sends its session (the timeline shows
    the change as soon as it is saved, not at the run's next step)."""
    active = RunRecord.objects.select_related("profile").filter(
        profile_id=profile_id, status__in=RunRecord.ACTIVE
    )
    for run in active:
        push_session(run)
