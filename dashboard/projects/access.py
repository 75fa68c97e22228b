"""The one scoping helper: what a user sees and may do, by project.

Every page, socket, export and search of the console asks an ``Access`` (``access_of`` for
a request, ``Access(user)`` for a socket) instead of reading every agent's rows:

- ``sees_agent`` / ``sees_session``: may the user read it (and, with ``role``, act on it);
- ``sessions``: the Event Log's session summaries the user may read;
- ``scope``: a queryset of rows that carry a ``session_id`` (spans, alerts, runs, kernels,
  recorded calls), narrowed to the user's sessions;
- ``agents``: the agent list for a search (None: every agent).

A user who may read every project (a superuser, or a viewer or more in each one, which is
everyone while the default project is the only one) is never narrowed, so the embedded
default pays nothing for projects.

Rows of another project answer 404, not 403: a page does not confirm that a session exists.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

from django.core.exceptions import PermissionDenied
from django.db.models import Q, QuerySet
from django.http import Http404, HttpRequest

from dashboard.eventlog import get_event_log
from dashboard.projects.models import (
    RANK,
    VIEWER,
    AgentOwner,
    Membership,
    Project,
    default_project_id,
)

__all__ = ["Access", "access_of", "require_session"]

Row = TypeVar("Row")


class Access:
    """One user's roles per project, and the checks the console makes with them."""

    def __init__(self, user: Any, *, remember_sessions: bool = False) -> None:
        """``remember_sessions``: work out ``session_ids`` once (a request's Access; a
        socket's lives on and must see sessions that start later)."""
        self.user = user
        self.remember_sessions = remember_sessions
        self._session_ids: set[str] | None = None
        authenticated = bool(user is not None and user.is_authenticated and user.is_active)
        self.default_id = default_project_id()
        projects = list(Project.objects.values_list("id", "everyone_role"))
        self.ranks: dict[int, int] = {}
        if authenticated:
            for pk, everyone in projects:
                self.ranks[pk] = RANK.get(everyone, 0)
            if user.is_superuser:
                self.ranks = {pk: RANK["admin"] for pk, _ in projects}
            else:
                rows = Membership.objects.filter(
                    Q(user_id=user.pk) | Q(group__in=user.groups.all())
                ).values_list("project_id", "role")
                for pk, role in rows:
                    self.ranks[pk] = max(self.ranks.get(pk, 0), RANK.get(role, 0))
        self.everything = authenticated and all(self.ranks.get(pk, 0) for pk, _ in projects)
        self._owners: dict[str, int] | None = None
        self._session_agents: dict[str, str] = {}

    # -- agents -------------------------------------------------------------------------
    def project_of(self, agent_id: str) -> int:
        if self._owners is None:
            self._owners = dict(AgentOwner.objects.values_list("agent_id", "project_id"))
        return self._owners.get(agent_id, self.default_id)

    def rank_in(self, project_id: int) -> int:
        return self.ranks.get(project_id, 0)

    def sees_agent(self, agent_id: str, role: str = VIEWER) -> bool:
        if self.everything and role == VIEWER:
            return True
        return self.rank_in(self.project_of(agent_id)) >= RANK[role]

    def agents(self) -> list[str] | None:
        """The agents the user reads (for a search's ``agent_id``); None: every agent."""
        if self.everything:
            return None
        known = {s.agent_id for s in get_event_log().sessions()} | set(self._owner_map())
        return sorted(a for a in known if self.sees_agent(a))

    def projects(self, role: str = VIEWER) -> list[Project]:
        """The projects where the user holds ``role`` or more, the default first."""
        return [p for p in Project.objects.all() if self.rank_in(p.pk) >= RANK[role]]

    def _owner_map(self) -> dict[str, int]:
        self.project_of("")
        assert self._owners is not None
        return self._owners

    # -- sessions -----------------------------------------------------------------------
    def agent_of_session(self, session_id: str) -> str:
        """The agent of a session: its events', else its run's; "" when neither exists."""
        found = self._session_agents.get(session_id)
        if found is None:
            from dashboard.runs.models import RunRecord

            summary = get_event_log().session(session_id)
            if summary is not None:
                found = summary.agent_id
            else:
                found = (
                    RunRecord.objects.filter(session_id=session_id)
                    .values_list("agent_id", flat=True)
                    .first()
                ) or ""
            self._session_agents[session_id] = found
        return found

    def sees_session(self, session_id: str, role: str = VIEWER) -> bool:
        if self.everything and role == VIEWER:
            return True
        return self.sees_agent(self.agent_of_session(session_id or ""), role)

    def sessions(self, summaries: Iterable[Row]) -> list[Row]:
        """The summaries (anything with ``agent_id``) of agents the user reads."""
        rows = list(summaries)
        if self.everything:
            return rows
        return [s for s in rows if self.sees_agent(getattr(s, "agent_id", ""))]

    def session_ids(self) -> set[str] | None:
        """Every session the user reads (events' or runs'); None: every session."""
        if self.everything:
            return None
        if self._session_ids is not None:
            return self._session_ids
        from dashboard.runs.models import RunRecord

        seen = {s.session_id for s in self.sessions(get_event_log().sessions())}
        for sid, agent in RunRecord.objects.values_list("session_id", "agent_id"):
            if sid not in seen and self.sees_agent(agent or ""):
                seen.add(sid)
        if self.remember_sessions:
            self._session_ids = seen
        return seen

    def scope(self, rows: QuerySet[Any], field: str = "session_id") -> QuerySet[Any]:
        """``rows`` narrowed to the user's sessions (unchanged for a user who reads all)."""
        ids = self.session_ids()
        if ids is None:
            return rows
        return rows.filter(**{f"{field}__in": sorted(ids)})

    def visible(self, items: Sequence[Row], key: str = "session_id") -> list[Row]:
        """Dicts or objects carrying a session id, kept when the user reads the session."""
        if self.everything:
            return list(items)
        out = []
        for item in items:
            sid = item.get(key) if isinstance(item, dict) else getattr(item, key, "")
            if self.sees_session(sid or ""):
                out.append(item)
        return out


def access_of(request: HttpRequest) -> Access:
    """The request's ``Access``, made once per request."""
    found = getattr(request, "_scroll_access", None)
    if found is None:
        found = Access(request.user, remember_sessions=True)
        request._scroll_access = found
    return found


def require_session(request: HttpRequest, session_id: str, role: str = VIEWER) -> None:
    """404 unless the user reads the session; 403 when they read it but lack ``role``."""
    access = access_of(request)
    if not access.sees_session(session_id):
        raise Http404("No such session")
    if role != VIEWER and not access.sees_session(session_id, role):
        raise PermissionDenied(
            f"You are not an {role} of this session's project: ask an admin of the project "
            "for the role (Django admin > Projects > Memberships)."
        )
