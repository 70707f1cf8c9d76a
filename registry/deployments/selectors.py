"""Reads for deployments: the fires that are due, the upcoming ticks of a schedule, and the checks a fire
makes before creating its session (each failure a typed `RunFailure`, which the fire records and pauses on,
and which a create or update answers as a 400)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any, cast

from django.conf import settings

from registry.agents.models import Agent, AgentVersion
from registry.core.egress import EgressRefused, check_url
from registry.core.schedule import ScheduleError, next_fire_after
from registry.deployments.errors import RunErrorType, RunFailure
from registry.deployments.models import Deployment
from registry.environments.models import Environment
from registry.environments.services import is_self_hosted
from registry.files.selectors import file_in_workspace
from registry.memory.models import MemoryStore
from registry.sessions.resources import WORKER_UNMOUNTABLE
from registry.skills.selectors import skill_version_for
from registry.vaults.models import Vault

DUE_BATCH = 100  # deployments fired per scheduler pass; the rest wait for the next pass
UPCOMING_RUNS = 5


# -- the schedule -----------------------------------------------------------------------------------------
def due_fires(*, now: datetime) -> list[tuple[str, datetime]]:
    """(deployment id, scheduled time) of the active, scheduled deployments due at `now`, most overdue first."""
    due = Deployment.objects.filter(
        status=Deployment.Status.ACTIVE, archived_at__isnull=True, next_fire_at__lte=now
    ).order_by("next_fire_at", "id")
    return cast(list[tuple[str, datetime]], list(due.values_list("id", "next_fire_at")[:DUE_BATCH]))


def upcoming_runs(deployment: Deployment, *, now: datetime) -> list[datetime]:
    """Up to five ticks of the schedule to come: from the due tick while active, from `now` while paused
    (what unpausing would give); none once archived or without a schedule."""
    expression, zone = deployment.schedule_expression, deployment.schedule_timezone
    if expression is None or zone is None or deployment.archived_at is not None:
        return []
    ticks: list[datetime] = []
    try:
        tick = deployment.next_fire_at if deployment.status == Deployment.Status.ACTIVE else None
        tick = tick or next_fire_after(expression, zone, now)
        while len(ticks) < UPCOMING_RUNS:
            ticks.append(tick)
            tick = next_fire_after(expression, zone, tick)
    except ScheduleError:  # the schedule never matches again
        pass
    return ticks


# -- what a fire needs, still there ----------------------------------------------------------------------
def pinned_spec(*, agent: Agent, version: int) -> dict[str, Any]:
    """The definition of `agent` at `version` (versions are never deleted)."""
    if version == agent.version:
        return cast(dict[str, Any], agent.spec)
    return cast(dict[str, Any], AgentVersion.objects.get(agent=agent, version=version).spec)


def check_agent(*, agent: Agent) -> None:
    if agent.archived_at is not None:
        raise RunFailure(RunErrorType.AGENT_ARCHIVED, f"Agent {agent.pk} is archived.", field="agent")


def check_skills(*, workspace_id: str, spec: dict[str, Any]) -> None:
    """Every custom skill of the agent's definition still exists at the version it names."""
    for reference in spec.get("skills") or []:
        if reference.get("type") != "custom":
            continue
        skill_id, version = reference["skill_id"], reference.get("version")
        if skill_version_for(workspace_id=workspace_id, skill_id=skill_id, version=version) is None:
            message = f"Skill {skill_id} (version {version or 'latest'}) not found."
            raise RunFailure(RunErrorType.SKILL_NOT_FOUND, message, field="agent")


def live_environment(*, workspace_id: str, environment_id: str) -> Environment:
    environment = Environment.objects.filter(workspace_id=workspace_id, pk=environment_id).first()
    if environment is None:
        message = f"Environment {environment_id} not found."
        raise RunFailure(RunErrorType.ENVIRONMENT_NOT_FOUND, message, field="environment_id")
    if environment.archived_at is not None:
        message = f"Environment {environment_id} is archived."
        raise RunFailure(RunErrorType.ENVIRONMENT_ARCHIVED, message, field="environment_id")
    return environment


def check_vaults(*, workspace_id: str, vault_ids: list[str]) -> None:
    archived_at = dict(
        Vault.objects.filter(workspace_id=workspace_id, pk__in=vault_ids).values_list("pk", "archived_at")
    )
    for index, vault_id in enumerate(vault_ids):
        field = f"vault_ids[{index}]"
        if vault_id not in archived_at:
            raise RunFailure(RunErrorType.VAULT_NOT_FOUND, f"Vault {vault_id} not found.", field=field)
        if archived_at[vault_id] is not None:
            raise RunFailure(RunErrorType.VAULT_ARCHIVED, f"Vault {vault_id} is archived.", field=field)


def check_resources(*, workspace_id: str, resources: list[dict[str, Any]], environment: Environment) -> None:
    """A self-hosted environment's worker mounts memory stores only; files and memory stores still exist."""
    if is_self_hosted(environment):
        for index, resource in enumerate(resources):
            if resource["type"] in WORKER_UNMOUNTABLE:
                message = (
                    f"Environment {environment.pk} is self-hosted: its worker cannot mount a {resource['type']} "
                    "resource (it syncs memory stores only)."
                )
                field = f"resources[{index}].type"
                raise RunFailure(RunErrorType.SELF_HOSTED_RESOURCES_UNSUPPORTED, message, field=field)
    stores = {resource["memory_store_id"] for resource in resources if resource["type"] == "memory_store"}
    archived_at = dict(
        MemoryStore.objects.filter(workspace_id=workspace_id, pk__in=stores).values_list("pk", "archived_at")
    )
    for index, resource in enumerate(resources):
        if resource["type"] == "file":
            _check_file(workspace_id, resource["file_id"], field=f"resources[{index}].file_id")
        elif resource["type"] == "memory_store":
            store_id, field = resource["memory_store_id"], f"resources[{index}].memory_store_id"
            if store_id not in archived_at:
                message = f"Memory store {store_id} not found."
                raise RunFailure(RunErrorType.SESSION_RESOURCE_NOT_FOUND, message, field=field)
            if archived_at[store_id] is not None:
                message = f"Memory store {store_id} is archived."
                raise RunFailure(RunErrorType.MEMORY_STORE_ARCHIVED, message, field=field)


def _check_file(workspace_id: str, file_id: str, *, field: str) -> None:
    file = file_in_workspace(workspace_id=workspace_id, file_id=file_id)
    if file is None or file.expired:
        raise RunFailure(RunErrorType.FILE_NOT_FOUND, f"File {file_id} not found.", field=field)


def _event_file_ids(event: dict[str, Any]) -> Iterator[str]:
    """The uploaded files an initial event names: a file rubric, image and document sources."""
    rubric = event.get("rubric") or {}
    if rubric.get("type") == "file":
        yield rubric["file_id"]
    for block in event.get("content") or []:
        source = block.get("source") if isinstance(block, dict) else None
        if isinstance(source, dict) and source.get("type") == "file":
            yield source["file_id"]


def check_event_files(*, workspace_id: str, events: Iterable[dict[str, Any]]) -> None:
    for index, event in enumerate(events):
        for file_id in _event_file_ids(event):
            _check_file(workspace_id, file_id, field=f"initial_events[{index}]")


def check_mcp_egress(*, spec: dict[str, Any]) -> None:
    """The runtime calls the agent's MCP servers itself (unless through the gateway): each URL must
    resolve to addresses it may reach. A name that does not resolve now is not refused here."""
    if settings.REGISTRY_MCP_VIA_GATEWAY:
        return
    for server in spec.get("mcp_servers") or []:
        try:
            check_url(server["url"])
        except EgressRefused as refused:
            if refused.rule is None:
                continue
            message = f"MCP server {server['name']!r}: its address is not one the runtime may connect to."
            raise RunFailure(RunErrorType.MCP_EGRESS_BLOCKED, message, field="agent") from None


def check_fire(deployment: Deployment) -> dict[str, Any]:
    """What a fire needs is still there (`RunFailure` says what is not); the agent's pinned definition."""
    workspace_id = deployment.workspace_id
    agent = Agent.objects.get(pk=deployment.agent_id)
    check_agent(agent=agent)
    spec = pinned_spec(agent=agent, version=deployment.agent_version)
    check_skills(workspace_id=workspace_id, spec=spec)
    environment = live_environment(workspace_id=workspace_id, environment_id=deployment.environment_id)
    check_vaults(workspace_id=workspace_id, vault_ids=list(deployment.vault_ids))
    check_resources(workspace_id=workspace_id, resources=list(deployment.resources), environment=environment)
    check_event_files(workspace_id=workspace_id, events=deployment.initial_events)
    check_mcp_egress(spec=spec)
    return spec
