"""Projects in Django admin: members (users and groups with a role) and owned agents.

Superusers manage every project and which agents each owns. A staff user who is an admin of
a project (a membership with role "admin") sees that project and its agents and edits its
members, and sees no other project.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from dashboard.projects.access import Access
from dashboard.projects.models import ADMIN, RANK, AgentOwner, Membership, Project


def _admin_of(request: HttpRequest, project: Project | None) -> bool:
    if request.user.is_superuser:
        return True
    if project is None:
        return False
    return Access(request.user).rank_in(project.pk) >= RANK[ADMIN]


class MembershipInline(admin.TabularInline):
    """A project's admins manage its members (Django's model permissions are not asked)."""

    model = Membership
    extra = 1

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return _admin_of(request, obj)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return _admin_of(request, obj)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return _admin_of(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return _admin_of(request, obj)


class AgentOwnerInline(admin.TabularInline):
    """Which agents a project owns: superusers only, since moving an agent moves its memory
    (a project admin could otherwise claim agents of the default project they cannot read)."""

    model = AgentOwner
    extra = 1
    readonly_fields = ("assigned_at",)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return _admin_of(request, obj)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.is_superuser

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.is_superuser

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.is_superuser


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = ("name", "is_default", "everyone_role", "created_at")
    search_fields = ("name",)
    readonly_fields = ("is_default", "created_at")
    inlines = (MembershipInline, AgentOwnerInline)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Project]:
        rows = super().get_queryset(request)
        if request.user.is_superuser:
            return rows
        access = Access(request.user)
        return rows.filter(pk__in=[pk for pk, r in access.ranks.items() if r >= RANK[ADMIN]])

    def has_module_permission(self, request: HttpRequest) -> bool:
        return request.user.is_superuser or bool(
            request.user.is_staff
            and any(r >= RANK[ADMIN] for r in Access(request.user).ranks.values())
        )

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.has_module_permission(request) and (obj is None or _admin_of(request, obj))

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.has_view_permission(request, obj)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return request.user.is_superuser

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.is_superuser and not (obj is not None and obj.is_default)
