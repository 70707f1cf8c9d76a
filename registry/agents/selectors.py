"""Reads for agents: one version of an agent, its version history, and the agent a session or trigger may
start from."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from registry.agents.models import Agent, AgentVersion
from registry.core.errors import invalid_request, not_found


def agent_version_get(*, agent: Agent, version: int) -> AgentVersion:
    found = AgentVersion.objects.filter(agent=agent, version=version).first()
    if found is None:
        raise not_found(f"Agent {agent.id} has no version {version}.")
    return found


def agent_versions(*, agent: Agent) -> QuerySet[AgentVersion]:
    return AgentVersion.objects.filter(agent=agent)


def usable_agent(*, workspace_id: str, reference: dict[str, Any]) -> tuple[Agent, int | None, dict[str, Any]]:
    """The live agent a reference names, the version it pins (None: the current one) and that version's
    spec; 400 naming the field when the agent is missing (or another workspace's), archived, or lacks
    the version."""
    agent = Agent.objects.filter(workspace_id=workspace_id, pk=reference["id"]).first()
    if agent is None:
        raise invalid_request(f"agent: no agent {reference['id']} in this workspace.")
    if agent.archived_at is not None:
        raise invalid_request(f"agent: agent {agent.id} is archived and cannot start new sessions.")
    version = reference.get("version")
    if version is None or version == agent.version:
        return agent, version, agent.spec
    found = AgentVersion.objects.filter(agent=agent, version=version).first()
    if found is None:
        raise invalid_request(f"agent.version: agent {agent.id} has no version {version}.")
    return agent, version, found.spec
