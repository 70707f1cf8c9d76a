"""Reads for environments: the environment a session may use."""

from __future__ import annotations

from registry.core.errors import invalid_request
from registry.environments.models import Environment


def usable_environment(*, workspace_id: str, environment_id: str, field: str = "environment_id") -> Environment:
    """The live environment of the workspace; 400 naming `field` when missing (or another's) or archived."""
    environment = Environment.objects.filter(workspace_id=workspace_id, pk=environment_id).first()
    if environment is None:
        raise invalid_request(f"{field}: no environment {environment_id} in this workspace.")
    if environment.archived_at is not None:
        raise invalid_request(f"{field}: environment {environment_id} is archived.")
    return environment
