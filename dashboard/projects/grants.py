"""Cross-agent grants, kept inside a project: a grant never reaches another project's agent."""

from __future__ import annotations

from dashboard.projects.models import AgentOwner, default_project_id
from dashboard.runs.grants import readable_by

__all__ = ["readable_in_project"]


def readable_in_project(reader_agent: str) -> set[str]:
    """``readable_by(reader_agent)`` less the agents of other projects than the reader's."""
    granted = readable_by(reader_agent)
    if not granted:
        return granted
    owners = dict(
        AgentOwner.objects.filter(agent_id__in=[reader_agent, *granted]).values_list(
            "agent_id", "project_id"
        )
    )
    default = default_project_id()
    home = owners.get(reader_agent, default)
    return {a for a in granted if owners.get(a, default) == home}
