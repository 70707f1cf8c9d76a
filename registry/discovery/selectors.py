"""The discovery documents (Kubernetes-style APIVersions, APIGroupList, APIResourceList) and readiness."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.executor import MigrationExecutor

# Resources each extension group serves, by the group's short name.
GROUP_RESOURCES: dict[str, list[dict[str, Any]]] = {
    "policy": [
        {"name": "guardrails", "kind": "Guardrail", "verbs": ["get", "list"]},
        {"name": "guardrailtypes", "kind": "GuardrailType", "verbs": ["get", "list"]},
    ],
    "pricing": [{"name": "modelprices", "kind": "ModelPrice", "verbs": ["get", "list"]}],
    "runtime": [
        {"name": "harnesses", "kind": "Harness", "verbs": ["get", "list"]},
        {"name": "environments/keys", "kind": "EnvironmentKey", "verbs": ["create", "get", "list", "revoke"]},
    ],
}
# The hosted-cloud group is never served by a self-hosted deployment.
NEVER_SERVED = {"cloud"}

CRUD = ["create", "get", "list", "update", "delete"]
CORE_RESOURCES = [
    {"name": name, "kind": kind, "verbs": verbs}
    for name, kind, verbs in (
        ("agents", "Agent", ["create", "get", "list", "update", "archive"]),
        ("environments", "Environment", [*CRUD, "archive"]),
        ("sessions", "Session", [*CRUD, "archive"]),
        ("files", "File", ["create", "get", "list", "delete"]),
        ("memory_stores", "MemoryStore", [*CRUD, "archive"]),
        ("skills", "Skill", ["create", "get", "list", "delete"]),
        ("vaults", "Vault", [*CRUD, "archive"]),
        ("git-creds", "GitCredential", [*CRUD, "archive"]),
        ("triggers", "Trigger", [*CRUD, "archive", "pause", "unpause", "start", "stop", "restart"]),
    )
]


def served_groups() -> list[str]:
    """Full names (`<short>.<ext_domain>`) of the extension groups this deployment serves."""
    return [
        f"{short}.{settings.REGISTRY_EXTENSION_DOMAIN}"
        for short in settings.REGISTRY_EXTENSION_GROUPS
        if short in GROUP_RESOURCES and short not in NEVER_SERVED
    ]


def api_versions() -> dict[str, Any]:
    return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}


def group_version(name: str) -> dict[str, str]:
    return {"groupVersion": f"{name}/v1", "version": "v1"}


def api_group_list() -> dict[str, Any]:
    groups = [
        {"name": name, "versions": [group_version(name)], "preferredVersion": group_version(name)}
        for name in served_groups()
    ]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_resource_list(group: str) -> dict[str, Any] | None:
    """The group's resources, or None when this deployment does not serve it."""
    if group not in served_groups():
        return None
    short = group.split(".", 1)[0]
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/v1",
        "resources": [{**resource, "namespaced": False} for resource in GROUP_RESOURCES[short]],
    }


def core_resource_list() -> dict[str, Any]:
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": "v1",
        "resources": [{**resource, "namespaced": False} for resource in CORE_RESOURCES],
    }


def readiness_problem() -> str | None:
    """None when the database answers and every migration is applied; else what is wrong."""
    try:
        connection = connections[DEFAULT_DB_ALIAS]
        connection.ensure_connection()
        executor = MigrationExecutor(connection)
        pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
    except Exception as error:  # any database failure means "not ready", whatever its class
        return f"database unreachable: {type(error).__name__}"
    if pending:
        return f"{len(pending)} migration(s) not applied"
    return None
