"""Reads for environments: the rendered environment object."""

from __future__ import annotations

from typing import Any

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
