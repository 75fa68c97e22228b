"""Cross-agent grants, kept inside a project: a grant never reaches another project's agent.

Registered with ``dashboard.runs.grants.narrow_grants_with`` when the app loads, so every
reader of grants (the run worker's sessions, the gateway's) applies it.
"""

from __future__ import annotations

from dashboard.projects.models import AgentOwner, default_project_id

__all__ = ["same_project"]


def same_project(reader_agent: str, granted: set[str]) -> set[str]:
    """The agents of ``granted`` in ``reader_agent``'s project."""
    owners = dict(
        AgentOwner.objects.filter(agent_id__in=[reader_agent, *granted]).values_list(
            "agent_id", "project_id"
        )
    )
    default = default_project_id()
    home = owners.get(reader_agent, default)
    return {a for a in granted if owners.get(a, default) == home}
