"""Cross-agent reading, granted by an operator: the one way past the tenant boundary.

The agent is the tenant of ``ms``: a session reads only its own agent's events. A row here
lets sessions of ``reader_agent`` also read ``readable_agent``'s. Grants are off by default,
given and revoked in admin by staff, never edited or deleted: each row keeps who granted it
and when, and who revoked it and when, so the table is its own audit trail. The runner hands
``readable_by`` to ``ms``, which asks it at every call, so a revoke closes a live session at
its next call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import F, Q
from django.utils import timezone

__all__ = ["AgentGrant", "grants_for", "narrow_grants_with", "readable_by", "readers_of"]

# Rules of a higher layer that narrow what a grant reaches (dashboard.projects keeps grants
# inside a project): each takes the reader and the agents granted, returns those kept.
GrantNarrower = Callable[[str, set[str]], set[str]]
_narrowers: list[GrantNarrower] = []


def narrow_grants_with(narrower: GrantNarrower) -> None:
    """Have ``readable_by`` apply ``narrower`` to every answer (registered once)."""
    if narrower not in _narrowers:
        _narrowers.append(narrower)


class AgentGrant(models.Model):
    """Sessions of ``reader_agent`` may read ``readable_agent``'s events, until revoked."""

    reader_agent = models.CharField(
        max_length=200, db_index=True, help_text="The agent whose sessions gain the read."
    )
    readable_agent = models.CharField(
        max_length=200, help_text="The agent whose events they may read."
    )
    reason = models.TextField(help_text="Why this agent may read the other's memory.")
    granted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="agent_grants_given",
    )
    granted_at = models.DateTimeField(default=timezone.now)
    revoked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="agent_grants_revoked",
    )
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "dashboard_agentgrant"
        app_label = "runs"
        ordering = ["-granted_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["reader_agent", "readable_agent"],
                condition=Q(revoked_at__isnull=True),
                name="one_live_grant_per_agent_pair",
            ),
            models.CheckConstraint(
                condition=~Q(reader_agent=F("readable_agent")), name="grant_names_another_agent"
            ),
        ]

    def __str__(self) -> str:
        state = "revoked" if self.revoked_at else "live"
        return f"{self.reader_agent} reads {self.readable_agent} ({state})"

    @property
    def live(self) -> bool:
        return self.revoked_at is None

    def clean(self) -> None:
        if self.reader_agent and self.reader_agent == self.readable_agent:
            raise ValidationError({"readable_agent": "An agent always reads its own events."})
        live = AgentGrant.objects.filter(
            reader_agent=self.reader_agent,
            readable_agent=self.readable_agent,
            revoked_at__isnull=True,
        ).exclude(pk=self.pk)
        if self.revoked_at is None and live.exists():
            raise ValidationError("A live grant for these two agents already exists.")

    def revoke(self, user: Any) -> bool:
        """Revoke once; returns False when it was already revoked (the first revoke stays)."""
        updated = AgentGrant.objects.filter(pk=self.pk, revoked_at__isnull=True).update(
            revoked_at=timezone.now(), revoked_by=user if user and user.pk else None
        )
        self.refresh_from_db()
        return updated == 1


def readable_by(reader_agent: str) -> set[str]:
    """The agents ``reader_agent``'s sessions may read besides their own (live grants, as
    the registered narrowers leave them)."""
    granted = set(
        AgentGrant.objects.filter(reader_agent=reader_agent, revoked_at__isnull=True).values_list(
            "readable_agent", flat=True
        )
    )
    for narrower in _narrowers:
        if not granted:
            break
        granted = narrower(reader_agent, granted)
    return granted


def grants_for(reader_agent: str) -> list[AgentGrant]:
    """Every grant given to ``reader_agent``, live and revoked, newest first."""
    return list(
        AgentGrant.objects.select_related("granted_by", "revoked_by").filter(
            reader_agent=reader_agent
        )
    )


def readers_of(readable_agent: str) -> list[str]:
    """The agents whose sessions may read ``readable_agent``'s events now (live grants)."""
    return sorted(
        set(
            AgentGrant.objects.filter(
                readable_agent=readable_agent, revoked_at__isnull=True
            ).values_list("reader_agent", flat=True)
        )
    )
