"""Reads for environments: the rendered environment object, and the environment a session may use."""

from __future__ import annotations

from typing import Any

from registry.core.errors import invalid_request
from registry.core.serialization import timestamp
from registry.environments.models import Environment


def render_environment(environment: Environment) -> dict[str, Any]:
    return {
        "id": environment.id,
        "type": "environment",
        "name": environment.name,
        "description": environment.description,
        "metadata": environment.metadata,
        "config": environment.config,
        "scope": environment.scope,
        "created_at": timestamp(environment.created_at),
        "updated_at": timestamp(environment.updated_at),
        "archived_at": timestamp(environment.archived_at),
    }


def usable_environment(*, workspace_id: str, environment_id: str, field: str = "environment_id") -> Environment:
    """The live environment of the workspace; 400 naming `field` when missing (or another's) or archived."""
    environment = Environment.objects.filter(workspace_id=workspace_id, pk=environment_id).first()
    if environment is None:
        raise invalid_request(f"{field}: no environment {environment_id} in this workspace.")
    if environment.archived_at is not None:
        raise invalid_request(f"{field}: environment {environment_id} is archived.")
    return environment
