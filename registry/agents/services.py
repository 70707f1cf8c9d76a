"""Writes for agents: create, update (a new version, with an optimistic lock), archive. Each change writes its
webhook event (`agent.*`) in its transaction; the API deletes no agent, so no `agent.deleted` is written."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from rest_framework import serializers

from registry.agents import multiagent
from registry.agents.models import Agent, AgentVersion
from registry.core.errors import conflict
from registry.core.fields import merge_metadata
from registry.core.services import resource_archive
from registry.skills.selectors import check_agent_skills
from registry.webhooks import outbox
from registry.workspaces.models import Workspace

SPEC_FIELDS = (
    "name",
    "description",
    "model",
    "system",
    "tools",
    "mcp_servers",
    "skills",
    "metadata",
    "execution_identity",
    "multiagent",
)
DEFAULT_IDENTITY = {"type": "service_account"}
# Built-in tools run in the sandbox and are allowed by default; MCP tools reach outside, so they ask.
DEFAULT_POLICY = {"agent_toolset_20260401": "always_allow", "mcp_toolset": "always_ask"}


def _normalized_toolset(tool: dict[str, Any]) -> dict[str, Any]:
    """Fill a toolset's defaults so the stored form is the complete one the API returns."""
    default_config = tool.get("default_config") or {}
    default_enabled = default_config.get("enabled")
    default_policy = default_config.get("permission_policy") or {"type": DEFAULT_POLICY[tool["type"]]}
    normalized_default = {
        "enabled": True if default_enabled is None else default_enabled,
        "permission_policy": dict(default_policy),
    }
    configs = []
    for config in tool.get("configs") or []:
        entry = {key: value for key, value in config.items() if value is not None}
        entry["enabled"] = normalized_default["enabled"] if config.get("enabled") is None else config["enabled"]
        entry["permission_policy"] = dict(config.get("permission_policy") or default_policy)
        if tool["type"] == "agent_toolset_20260401":
            entry["type"] = config["name"]
        configs.append(entry)
    normalized = {"type": tool["type"], "configs": configs, "default_config": normalized_default}
    if tool["type"] == "mcp_toolset":
        normalized["mcp_server_name"] = tool["mcp_server_name"]
    return normalized


def _normalized_tool(tool: dict[str, Any]) -> dict[str, Any]:
    return dict(tool) if tool["type"] == "custom" else _normalized_toolset(tool)


def _check_references(spec: dict[str, Any]) -> None:
    """MCP server names are unique and every server is used by exactly the toolsets that name it."""
    server_names = [server["name"] for server in spec["mcp_servers"]]
    if len(set(server_names)) != len(server_names):
        raise serializers.ValidationError({"mcp_servers": ["server names must be unique."]})
    referenced = {tool["mcp_server_name"] for tool in spec["tools"] if tool["type"] == "mcp_toolset"}
    unknown = sorted(referenced - set(server_names))
    if unknown:
        raise serializers.ValidationError({"tools": [f"mcp_toolset names unknown MCP server(s): {unknown}."]})
    unused = sorted(set(server_names) - referenced)
    if unused:
        raise serializers.ValidationError({"mcp_servers": [f"server(s) not referenced by an mcp_toolset: {unused}."]})
    custom_names = [tool["name"] for tool in spec["tools"] if tool["type"] == "custom"]
    if len(set(custom_names)) != len(custom_names):
        raise serializers.ValidationError({"tools": ["custom tool names must be unique."]})


def build_spec(values: dict[str, Any], base: dict[str, Any] | None = None) -> dict[str, Any]:
    """The complete, normalized definition from validated input (a patch over `base` for updates)."""
    spec = (
        dict(base)
        if base
        else {
            "description": None,
            "system": None,
            "tools": [],
            "mcp_servers": [],
            "skills": [],
            "metadata": {},
            "execution_identity": DEFAULT_IDENTITY,
            "multiagent": None,
        }
    )
    for field in SPEC_FIELDS:
        if field not in values:
            continue
        value = values[field]
        if field == "metadata":
            spec["metadata"] = merge_metadata(spec.get("metadata") or {}, value)
        elif field in ("tools", "mcp_servers", "skills"):
            spec[field] = list(value or [])
        elif field == "execution_identity":
            spec[field] = value or DEFAULT_IDENTITY
        else:
            spec[field] = value
    spec["tools"] = [_normalized_tool(tool) for tool in spec["tools"]]
    spec["mcp_servers"] = [dict(server) for server in spec["mcp_servers"]]
    spec["skills"] = [{**skill, "version": skill.get("version") or "latest"} for skill in spec["skills"]]
    _check_references(spec)
    return spec


@transaction.atomic
def agent_create(*, workspace: Workspace, values: dict[str, Any]) -> Agent:
    spec = build_spec(values)
    check_agent_skills(workspace_id=workspace.pk, skills=spec["skills"])
    agent = Agent(workspace=workspace, name=spec["name"], version=1)  # its id is known before it is saved
    spec["multiagent"] = multiagent.resolve(spec["multiagent"], workspace_id=workspace.pk, agent_id=agent.pk, version=1)
    agent.spec = spec
    agent.save(force_insert=True)
    AgentVersion.objects.create(agent=agent, version=1, spec=spec)
    outbox.emit("agent.created", workspace_id=workspace.pk, object_id=agent.pk)
    return agent


@transaction.atomic
def agent_update(*, agent: Agent, values: dict[str, Any]) -> Agent:
    """Apply a partial update as a new version; `version` in the body must match the current one. The
    agent's own roster entries move with it to the new version."""
    locked = Agent.objects.select_for_update().get(pk=agent.pk)
    expected = values.get("version")
    if expected is not None and expected != locked.version:
        raise conflict(f"version: the agent is at version {locked.version}, not {expected}.")
    spec = build_spec(values, base=locked.spec)
    if "skills" in values:
        check_agent_skills(workspace_id=locked.workspace_id, skills=spec["skills"])
    if "multiagent" in values:  # replaced whole; `self` pinned to the current version, so a resend is a no-op
        spec["multiagent"] = multiagent.resolve(
            spec["multiagent"], workspace_id=locked.workspace_id, agent_id=locked.pk, version=locked.version
        )
    if spec == locked.spec:
        return locked
    locked.version += 1
    spec["multiagent"] = multiagent.follow_self(
        spec.get("multiagent"), agent_id=locked.pk, previous=locked.version - 1, saved=locked.version
    )
    locked.spec = spec
    locked.name = spec["name"]
    locked.save(update_fields=["version", "spec", "name", "updated_at"])
    AgentVersion.objects.create(agent=locked, version=locked.version, spec=spec)
    outbox.emit("agent.updated", workspace_id=locked.workspace_id, object_id=locked.pk)
    return locked


@transaction.atomic
def agent_archive(*, agent: Agent) -> Agent:
    """Archive once (archiving an archived agent answers it again); the deployments that run it pause."""
    locked = Agent.objects.select_for_update().get(pk=agent.pk)
    if locked.archived_at is not None:
        return locked
    resource_archive(instance=locked)
    # Imported here: the deployments app's services import the agents app (a deployment runs an agent).
    from registry.deployments.services import deployments_pause_for_archive

    deployments_pause_for_archive(workspace_id=locked.workspace_id, agent_id=locked.pk)
    outbox.emit("agent.archived", workspace_id=locked.workspace_id, object_id=locked.pk)
    return locked
