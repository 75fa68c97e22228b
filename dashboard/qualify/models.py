"""One qualification of a model: where it was reached, by whom, and its scorecard (the suite's
``Scorecard.to_dict()``, kept whole so scorecards of any suite version stay readable)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone

from scroll_core.qualify import Scorecard


class Qualification(models.Model):
    QUEUED, RUNNING, DONE, FAILED = "queued", "running", "done", "failed"
    STATUS_CHOICES = [(s, s) for s in (QUEUED, RUNNING, DONE, FAILED)]

    model_name = models.CharField(max_length=200)
    api = models.CharField(max_length=16, default="openai")
    upstream = models.CharField(max_length=500, blank=True)
    # The name of the environment variable holding the key on the server, never the key.
    key_env = models.CharField(max_length=100, blank=True)
    profile = models.CharField(max_length=100, blank=True, help_text="tuning profile qualified for")
    suite_version = models.CharField(max_length=20, blank=True)
    status = models.CharField(max_length=16, choices=STATUS_CHOICES, default=QUEUED)
    error = models.TextField(blank=True)
    total = models.FloatField(null=True, blank=True)
    passed = models.BooleanField(null=True, blank=True)
    scorecard = models.JSONField(default=dict, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.model_name} #{self.pk} ({self.status})"

    @property
    def card(self) -> Scorecard | None:
        return Scorecard.from_dict(self.scorecard) if self.scorecard else None

    def record(self, card: Scorecard) -> None:
        """Store a finished scorecard."""
        self.scorecard = card.to_dict()
        self.suite_version = card.suite_version
        self.total = card.total
        self.passed = card.passed
        self.status = self.DONE
        self.finished_at = timezone.now()
        self.save()

    def summary(self) -> dict[str, Any]:
        return {
            "id": self.pk,
            "model": self.model_name,
            "status": self.status,
            "total": self.total,
            "passed": self.passed,
            "suite_version": self.suite_version,
        }


class QualificationRequirement(models.Model):
    """A profile that requires a passing qualification of every model a gateway key with it
    maps to: a change without one is refused or only warned, as the operator chose, and
    either way audited (``GateDecision``)."""

    WARN, REFUSE = "warn", "refuse"
    MODE_CHOICES = [(WARN, "warn and allow"), (REFUSE, "refuse")]

    profile = models.OneToOneField(
        "runs.TuningProfile", on_delete=models.CASCADE, related_name="qualification_requirement"
    )
    mode = models.CharField(max_length=8, choices=MODE_CHOICES, default=REFUSE)

    def __str__(self) -> str:
        return f"{self.profile} requires qualified models ({self.mode})"


class GateDecision(models.Model):
    """One change a qualification requirement applied to: what was asked, what was missing,
    and whether it was allowed, warned or refused. Append-only in admin."""

    ALLOWED, WARNED, REFUSED = "allowed", "warned", "refused"

    at = models.DateTimeField(default=timezone.now)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    profile = models.CharField(max_length=100)
    subject = models.CharField(max_length=200, help_text="what changed, e.g. gateway key agent-1")
    api = models.CharField(max_length=16)
    models_asked = models.JSONField(default=list)
    missing = models.JSONField(default=list)
    mode = models.CharField(max_length=8)
    outcome = models.CharField(max_length=8)

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.subject}: {self.outcome} ({', '.join(self.missing) or 'all qualified'})"
