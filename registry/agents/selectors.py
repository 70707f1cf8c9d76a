"""Reads for agents: one version of an agent, its version history, and the rendered object."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from registry.agents.models import Agent, AgentVersion
from registry.core.errors import not_found
from registry.core.serialization import timestamp


def render_agent(agent: Agent, version: AgentVersion | None = None) -> dict[str, Any]:
    """The agent object of the API, at its current version or at `version`."""
    spec = version.spec if version is not None else agent.spec
    return {
        "id": agent.id,
        "type": "agent",
        "version": version.version if version is not None else agent.version,
        **spec,
        "created_at": timestamp(agent.created_at),
        "updated_at": timestamp(version.created_at if version is not None else agent.updated_at),
        "archived_at": timestamp(agent.archived_at),
    }


def agent_version_get(*, agent: Agent, version: int) -> AgentVersion:
    found = AgentVersion.objects.filter(agent=agent, version=version).first()
    if found is None:
        raise not_found(f"Agent {agent.id} has no version {version}.")
    return found


def agent_versions(*, agent: Agent) -> QuerySet[AgentVersion]:
    return AgentVersion.objects.filter(agent=agent)
