"""The qualification gate: a profile with a ``QualificationRequirement`` accepts a model only
when a qualification of that model, in that API format, under the current suite version,
passed. ``evaluate`` says what a change would meet (forms call it to refuse before saving);
``record`` audits the decision once the change is made or refused."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from dashboard.runs.models import TuningProfile
from scroll_core.qualify import SUITE_VERSION

from .models import GateDecision, Qualification, QualificationRequirement

__all__ = ["Verdict", "evaluate", "qualified", "record"]


@dataclass(frozen=True)
class Verdict:
    """What the gate says of a change: ``mode`` is None when the profile requires nothing."""

    profile: str
    api: str
    models: tuple[str, ...]
    mode: str | None = None
    missing: tuple[str, ...] = field(default_factory=tuple)

    @property
    def applies(self) -> bool:
        return self.mode is not None

    @property
    def refused(self) -> bool:
        return self.mode == QualificationRequirement.REFUSE and bool(self.missing)

    @property
    def outcome(self) -> str:
        if not self.missing:
            return GateDecision.ALLOWED
        return GateDecision.REFUSED if self.refused else GateDecision.WARNED

    @property
    def message(self) -> str:
        if not self.missing:
            return f"Every model is qualified for profile {self.profile!r}."
        names = ", ".join(repr(m) for m in self.missing)
        if not self.models:
            what = "no upstream model is named (map the client's models to qualified ones)"
        else:
            what = f"{names} has no passing qualification ({self.api}, suite {SUITE_VERSION})"
        return (
            f"Profile {self.profile!r} requires qualified models: {what}. Run "
            f"`manage.py scroll_qualify` or start one on the Qualify page."
        )


def qualified(model: str, api: str) -> bool:
    return Qualification.objects.filter(
        model_name=model, api=api, passed=True, suite_version=SUITE_VERSION
    ).exists()


def evaluate(profile: TuningProfile | None, models: Iterable[str], api: str) -> Verdict:
    names = tuple(sorted({m for m in models if m}))
    if profile is None:
        return Verdict("", api, names)
    requirement = QualificationRequirement.objects.filter(profile=profile).first()
    if requirement is None:
        return Verdict(profile.name, api, names)
    missing = tuple(m for m in names if not qualified(m, api)) if names else ("(none)",)
    return Verdict(profile.name, api, names, requirement.mode, missing)


def record(verdict: Verdict, *, subject: str, user: Any = None) -> GateDecision | None:
    """Audit a decision the requirement applied to (None when it did not apply)."""
    if not verdict.applies:
        return None
    return GateDecision.objects.create(
        user=user if getattr(user, "is_authenticated", False) else None,
        profile=verdict.profile,
        subject=subject,
        api=verdict.api,
        models_asked=list(verdict.models),
        missing=list(verdict.missing),
        mode=verdict.mode or "",
        outcome=verdict.outcome,
    )
