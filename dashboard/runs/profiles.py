"""Django TuningProfile <-> scroll_core.Profile, and the audit of every change."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db import transaction

from dashboard.runs.models import PROFILE_FIELDS, ProfileChange, TuningProfile
from scroll_core.profile import Profile

__all__ = ["core_profile", "record_changes", "save_profile", "snapshot"]


def snapshot(profile: TuningProfile) -> dict[str, Any]:
    """The knobs as stored now (read back from the database, not the edited instance)."""
    if profile.pk is None:
        return {}
    stored = TuningProfile.objects.filter(pk=profile.pk).values(*PROFILE_FIELDS).first()
    return dict(stored or {})


def record_changes(
    profile: TuningProfile, before: Mapping[str, Any], user: Any = None
) -> list[ProfileChange]:
    """One ProfileChange per knob whose value differs from ``before`` (all of them for a new
    profile, with an empty old value)."""
    changes = []
    for name in PROFILE_FIELDS:
        new = getattr(profile, name)
        old = before.get(name)
        if before and old == new:
            continue
        changes.append(
            ProfileChange(
                profile=profile,
                changed_by=user if getattr(user, "is_authenticated", False) else None,
                field=name,
                old_value="" if old is None else str(old),
                new_value=str(new),
            )
        )
    created = ProfileChange.objects.bulk_create(changes)
    if created and profile.pk is not None:
        # Live session pages of runs on this profile show the change once it is committed.
        from dashboard.runs.notify import push_profile_runs

        profile_id = profile.pk
        transaction.on_commit(lambda: push_profile_runs(profile_id))
    return created


def save_profile(profile: TuningProfile, user: Any = None) -> list[ProfileChange]:
    """Validate, save and audit in one transaction; raises ValidationError when invalid."""
    profile.full_clean()
    with transaction.atomic():
        before = snapshot(profile)
        profile.save()
        return record_changes(profile, before, user)


def core_profile(profile_id: int | None) -> Profile:
    """The current core Profile of a stored profile (the default one when it is gone).

    Runs call this before every compress, so an edit in admin applies at the next one."""
    row = TuningProfile.objects.filter(pk=profile_id).first() if profile_id else None
    return (row or TuningProfile.get_default()).to_core()
