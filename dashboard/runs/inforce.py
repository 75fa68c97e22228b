"""A recorded session as replay and the context window inspector read it: its trace, and the
tuning profile that was in force at each of its compresses.

A run re-reads its profile before every compress, and every change to a profile is audited
(``ProfileChange``), so the profile in force when a compress ran is the profile as it is now
with every change made after that moment undone. The moment is the creation time of the
event the compress was bounded by (the loop compresses right after appending it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from dashboard.eventlog import get_event_log
from dashboard.runs.models import CompressEvent, ProfileChange, RunRecord, TuningProfile
from scroll_core.errors import ConfigError
from scroll_core.profile import Profile
from scroll_core.replay import RecordedCompress, Trace, TraceError, load_trace
from scroll_core.timeutil import parse_ts

__all__ = ["Recorded", "load_recorded", "profiles_in_force", "recorded_compresses"]


@dataclass
class Recorded:
    """A session's trace with its profile name, the profile at each compress point and the
    profile it ended with (the replay lab's knobs start from it)."""

    trace: Trace
    profile_name: str
    profiles: list[Profile]
    final: Profile
    changes: int = 0  # audited changes made while it ran
    notes: list[str] = field(default_factory=list)

    @property
    def profile_changed(self) -> bool:
        return len(set(self.profiles)) > 1


def recorded_compresses(session_id: str) -> list[RecordedCompress]:
    """The console's compress rows of a session, as replay takes them."""
    rows = CompressEvent.objects.filter(session_id=session_id).order_by("id")
    return [
        RecordedCompress(
            turn=row.turn,
            step=row.step,
            reason=row.reason or "after_step",
            action=row.action,
            forced=row.forced,
            digest_tokens=row.digest_tokens,
            prefix_tokens=row.prefix_tokens,
            evicted=(row.evicted_lo, row.evicted_hi) if row.evicted_lo is not None else None,
            folds=row.folds,
            tokens_before=row.tokens_before,
            tokens_after=row.tokens_after,
        )
        for row in rows
    ]


def load_recorded(session_id: str) -> Recorded:
    """The session's trace (from its compress rows when they fit the log) and the profiles in
    force; ``TraceError`` when the Event Log has no such session."""
    log = get_event_log()
    rows = recorded_compresses(session_id)
    notes: list[str] = []
    try:
        trace = load_trace(log, session_id, compresses=rows or None)
    except TraceError as exc:
        if not rows:
            raise
        trace = load_trace(log, session_id)
        notes.append(f"compress records ignored: {exc}")
    name, profiles, final, changes = profiles_in_force(session_id, trace)
    return Recorded(trace, name, profiles, final, changes, notes)


def _row_of(session_id: str) -> tuple[TuningProfile, bool]:
    run = RunRecord.objects.filter(session_id=session_id).select_related("profile").first()
    if run is not None and run.profile is not None:
        return run.profile, True
    return TuningProfile.get_default(), False


def profiles_in_force(session_id: str, trace: Trace) -> tuple[str, list[Profile], Profile, int]:
    """The profile name, the profile at each compress point of ``trace``, the last of them,
    and how many audited changes fell inside the session. A session the console did not run
    (an import) is read under the ``default`` profile as it is now."""
    row, ran_here = _row_of(session_id)
    current = row.knobs()
    try:
        now = Profile.from_mapping(current)
    except ConfigError as exc:
        raise TraceError(f"the recorded profile {row.name!r} is invalid: {exc}") from exc
    if not ran_here or not trace.compresses:
        return row.name, [now] * len(trace.compresses), now, 0
    newest_first = list(ProfileChange.objects.filter(profile=row).order_by("-changed_at", "-id"))
    created = {e.seq: e.created_at for e in trace.events}
    cache: dict[tuple[tuple[str, object], ...], Profile] = {}
    profiles: list[Profile] = []
    moments: list[datetime] = []
    for point in trace.compresses:
        moment = parse_ts(created[point.seq]) if point.seq in created else None
        knobs = dict(current)
        for change in newest_first:
            if moment is None or change.changed_at <= moment:
                break
            if change.old_value != "":
                knobs[change.field] = change.old_value
        key = tuple(sorted(knobs.items()))
        if key not in cache:
            try:
                cache[key] = Profile.from_mapping(knobs)
            except ConfigError as exc:
                raise TraceError(
                    f"the profile {row.name!r} as it stood at seq {point.seq} is invalid: {exc}"
                ) from exc
        profiles.append(cache[key])
        if moment is not None:
            moments.append(moment)
    inside = 0
    if moments:
        inside = sum(1 for c in newest_first if moments[0] < c.changed_at <= moments[-1])
    return row.name, profiles, profiles[-1], inside
