"""Writes for environments: create, partial update (config fields omitted keep their value), archive, delete;
each change writes its webhook event (`environment.*`) in its transaction."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from rest_framework import serializers

from registry.core.services import apply_updates, resource_archive
from registry.environments.models import Environment
from registry.environments.serializers import PACKAGE_MANAGERS
from registry.webhooks import outbox
from registry.workspaces import scoped_credentials
from registry.workspaces.models import Workspace

DEFAULT_NETWORKING = {"type": "unrestricted"}


def _packages(given: dict[str, Any] | None, current: dict[str, Any] | None) -> dict[str, Any]:
    base = current or {}
    given = given or {}
    return {
        "type": "packages",
        **{
            manager: list(given[manager] or []) if manager in given else list(base.get(manager, []))
            for manager in PACKAGE_MANAGERS
        },
    }


def _networking(given: dict[str, Any] | None) -> dict[str, Any]:
    if given is None or given["type"] == "unrestricted":
        return dict(DEFAULT_NETWORKING)
    return {
        "type": "limited",
        "allow_mcp_servers": bool(given.get("allow_mcp_servers")),
        "allow_package_managers": bool(given.get("allow_package_managers")),
        "allowed_hosts": list(given.get("allowed_hosts") or []),
    }


def build_config(given: dict[str, Any] | None, current: dict[str, Any] | None = None) -> dict[str, Any]:
    """The complete config: omitted cloud fields keep the current value (or the default)."""
    if given is None:
        return current or {"type": "cloud", "networking": dict(DEFAULT_NETWORKING), "packages": _packages(None, None)}
    if given["type"] == "self_hosted":
        return {"type": "self_hosted"}
    same_kind = current if current and current.get("type") == "cloud" else None
    networking = (
        _networking(given["networking"])
        if "networking" in given
        else (same_kind["networking"] if same_kind else dict(DEFAULT_NETWORKING))
    )
    packages = _packages(given.get("packages"), same_kind["packages"] if same_kind else None)
    wants_packages = any(packages[manager] for manager in PACKAGE_MANAGERS)
    if networking["type"] == "limited" and wants_packages and not networking["allow_package_managers"]:
        raise serializers.ValidationError(
            {"config": ["packages under limited networking need networking.allow_package_managers: true."]}
        )
    return {"type": "cloud", "networking": networking, "packages": packages}


@transaction.atomic
def environment_create(*, workspace: Workspace, values: dict[str, Any]) -> Environment:
    environment = Environment.objects.create(
        workspace=workspace,
        name=values["name"],
        description=values.get("description"),
        metadata=values.get("metadata", {}),
        config=build_config(values.get("config")),
        scope=values.get("scope") or "organization",
    )
    outbox.emit("environment.created", workspace_id=workspace.pk, object_id=environment.pk)
    return environment


@transaction.atomic
def environment_update(*, environment: Environment, values: dict[str, Any]) -> Environment:
    locked = Environment.objects.select_for_update().get(pk=environment.pk)
    apply_updates(locked, values, ("name", "description"))
    if values.get("config") is not None:
        locked.config = build_config(values["config"], locked.config)
    if values.get("scope"):
        locked.scope = values["scope"]
    locked.save()
    outbox.emit("environment.updated", workspace_id=locked.workspace_id, object_id=locked.pk)
    return locked


@transaction.atomic
def environment_archive(*, environment: Environment) -> Environment:
    """Archive once (archiving an archived environment answers it again); the deployments in it pause."""
    locked = Environment.objects.select_for_update().get(pk=environment.pk)
    if locked.archived_at is not None:
        return locked
    resource_archive(instance=locked)
    # Imported here: the deployments app's services import the environments app (a deployment runs in one).
    from registry.deployments.services import deployments_pause_for_archive

    deployments_pause_for_archive(workspace_id=locked.workspace_id, environment_id=locked.pk)
    outbox.emit("environment.archived", workspace_id=locked.workspace_id, object_id=locked.pk)
    return locked


@transaction.atomic
def environment_delete(*, environment: Environment) -> None:
    """Delete the environment; `environment.deleted` is written only once the row is gone."""
    environment_id, workspace_id = environment.pk, environment.workspace_id
    environment.delete()
    outbox.emit("environment.deleted", workspace_id=workspace_id, object_id=environment_id)


# -- environment keys (issue 26): minted by staff for a self_hosted environment ---------------------------------


def is_self_hosted(environment: Environment) -> bool:
    return (environment.config or {}).get("type") == "self_hosted"


def environment_key_mint(*, environment: Environment, name: str = "") -> scoped_credentials.IssuedEnvironmentKey:
    """A new key for `environment`, which must be a live self_hosted environment; the plaintext is in the
    result only (shown once), the row keeps its digest."""
    if not is_self_hosted(environment):
        raise serializers.ValidationError(
            {"environment_id": f"Environment {environment.pk} is not self_hosted: only those have environment keys."}
        )
    if environment.archived_at is not None:
        raise serializers.ValidationError({"environment_id": f"Environment {environment.pk} is archived."})
    return scoped_credentials.environment_key_issue(
        workspace=environment.workspace, environment_id=str(environment.pk), name=name
    )
