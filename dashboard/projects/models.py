"""Projects own agents; users and groups hold a role in a project.

An agent belongs to the project an ``AgentOwner`` row names, or to the default project when
no row names it (agents imported from transcripts, agents of the days before projects). A
user's role in a project is the highest of: their own membership, their groups'
memberships, and the project's ``everyone_role`` (the role every logged-in user holds there;
the default project's is "operator", so a fresh console stays open to everyone and the
Django permissions of ``dashboard.runs.permissions`` decide who runs code, as before).
Superusers hold the admin role everywhere.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q
from django.utils import timezone

__all__ = [
    "ADMIN",
    "OPERATOR",
    "RANK",
    "ROLES",
    "VIEWER",
    "AgentOwner",
    "Membership",
    "Project",
    "default_project_id",
]

VIEWER = "viewer"
OPERATOR = "operator"
ADMIN = "admin"
ROLES = [
    (VIEWER, "viewer: reads its agents' sessions, events, traces, alerts and kernels"),
    (OPERATOR, "operator: a viewer who may also start and stop runs and kernels"),
    (ADMIN, "admin: an operator who may also manage the project's members and agents"),
]
RANK = {VIEWER: 1, OPERATOR: 2, ADMIN: 3}
DEFAULT_NAME = "Default"


class Project(models.Model):
    name = models.CharField(max_length=120, unique=True)
    description = models.TextField(blank=True)
    is_default = models.BooleanField(
        default=False,
        editable=False,
        help_text="The project of every agent no other project owns (exactly one).",
    )
    everyone_role = models.CharField(
        max_length=16,
        choices=ROLES,
        blank=True,
        help_text="The role every logged-in user holds here without a membership; blank: "
        "only members see the project.",
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        ordering = ["-is_default", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["is_default"], condition=Q(is_default=True), name="one_default_project"
            )
        ]

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    """A user's or a group's role in a project (exactly one of the two)."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="project_memberships",
    )
    group = models.ForeignKey(
        Group,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="project_memberships",
    )
    role = models.CharField(max_length=16, choices=ROLES, default=VIEWER)

    class Meta:
        ordering = ["project", "id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(user__isnull=False, group__isnull=True)
                | Q(user__isnull=True, group__isnull=False),
                name="membership_names_a_user_or_a_group",
            ),
            models.UniqueConstraint(fields=["project", "user"], name="one_membership_per_user"),
            models.UniqueConstraint(fields=["project", "group"], name="one_membership_per_group"),
        ]

    def __str__(self) -> str:
        who = f"user {self.user}" if self.user_id else f"group {self.group}"
        return f"{who}: {self.role} in {self.project}"

    def clean(self) -> None:
        if (self.user_id is None) == (self.group_id is None):
            raise ValidationError("A membership names a user or a group (one of the two).")


class AgentOwner(models.Model):
    """The project that owns an agent (its sessions, events, runs, spans, alerts, kernels)."""

    agent_id = models.CharField(max_length=200, unique=True)
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="agents")
    assigned_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        ordering = ["agent_id"]

    def __str__(self) -> str:
        return f"{self.agent_id} in {self.project}"


def default_project_id() -> int:
    """The default project's id (made here if a flush or a test removed it)."""
    project, _ = Project.objects.get_or_create(
        is_default=True, defaults={"name": DEFAULT_NAME, "everyone_role": OPERATOR}
    )
    return project.pk
