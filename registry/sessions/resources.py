"""A session's resources: the records stored at create, and the live API (list, retrieve, add, update,
delete under `/v1/sessions/{id}/resources`).

A resource is stored as a record in the session's `resources` list: an id, timestamps, the defaults
filled in (mount paths, memory access, the memory store's name and description as attached) and a
repository token sealed, never echoed. Every reference must name a live resource of the session's
workspace; one of another workspace is answered exactly as a missing one. Two resources may not
share a mount path. The runtime reads the list before each tool call, so a change is mounted before
the session's next one.
"""

from __future__ import annotations

import re
import secrets
from typing import Any

from django.db import transaction
from django.utils import timezone

from registry.core.errors import conflict, invalid_request, not_found
from registry.core.secrets import seal
from registry.core.selectors import require_live
from registry.files.selectors import check_file_resources
from registry.gitcreds.selectors import git_credential_for_url
from registry.memory.models import MemoryStore
from registry.sessions import work
from registry.sessions.models import Session
from registry.workspaces.models import Workspace

MEMORY_ROOT = "/mnt/memory"
UNSAFE_FOLDER_CHARACTERS = re.compile(r"[/\x00-\x1f\x7f]")


def memory_folder(name: str) -> str:
    """A store's name as a folder name: `/` and control characters replaced, never `.` or `..`."""
    folder = UNSAFE_FOLDER_CHARACTERS.sub("_", name).strip() or "store"
    return "_" * len(folder) if folder in (".", "..") else folder


def check_references(workspace: Workspace, resources: list[dict[str, Any]]) -> None:
    """Files and memory stores named must be live in the workspace (another's reads as missing)."""
    check_file_resources(workspace_id=workspace.pk, resources=resources)
    store_ids = [item["memory_store_id"] for item in resources if item["type"] == "memory_store"]
    require_live(MemoryStore, workspace=workspace, ids=store_ids, field="resources", noun="memory store")


# What an environment worker (the reference client's) cannot mount: it syncs memory stores only.
WORKER_UNMOUNTABLE = ("file", "github_repository")


def build_records(
    workspace: Workspace, resources: list[dict[str, Any]], existing: list[dict[str, Any]], *, on_worker: bool = False
) -> list[dict]:
    """The stored records of new resources, checked against each other and the session's others.
    `on_worker`: the session's tools run in an environment worker, which mounts memory stores only."""
    if on_worker:
        _check_worker_mountable(resources)
    check_references(workspace, resources)
    now = timezone.now().isoformat()
    records = [_record(workspace, resource, now) for resource in resources]
    _check_mount_paths([*existing, *records])
    return records


def _check_worker_mountable(resources: list[dict[str, Any]]) -> None:
    for index, resource in enumerate(resources):
        if resource["type"] in WORKER_UNMOUNTABLE:
            raise invalid_request(
                f"resources[{index}].type: self_hosted_resources_unsupported: a {resource['type']} resource cannot be "
                "mounted by a self-hosted environment's worker (it syncs memory stores only); put the content "
                "in the worker's working directory, or use a cloud environment."
            )


def _record(workspace: Workspace, resource: dict[str, Any], now: str) -> dict[str, Any]:
    record = {key: value for key, value in resource.items() if key != "authorization_token"}
    record["id"] = f"sesrsc_{secrets.token_hex(12)}"
    record["created_at"] = record["updated_at"] = now
    if resource["type"] == "file":
        record["mount_path"] = record.get("mount_path") or f"/mnt/session/uploads/{resource['file_id']}"
    elif resource["type"] == "memory_store":
        store = MemoryStore.objects.get(workspace=workspace, pk=resource["memory_store_id"])
        record["access"] = record.get("access") or "read_write"
        record.setdefault("instructions", None)
        record["name"] = store.name
        record["description"] = store.description
        record["mount_path"] = f"{MEMORY_ROOT}/{memory_folder(store.name)}"
    else:
        repository = resource["url"].rstrip("/").rsplit("/", 1)[-1].removesuffix(".git")
        record["mount_path"] = record.get("mount_path") or f"/workspace/{repository}"
        record.setdefault("checkout", None)
        _check_checkout(record["checkout"])
        record.update(_repository_secret(workspace, resource, record["id"]))
    return record


def _check_checkout(checkout: dict[str, Any] | None) -> None:
    if checkout is None:
        return
    needed = "name" if checkout["type"] == "branch" else "sha"
    if not checkout.get(needed):
        raise invalid_request(f"resources: checkout.{needed}: required for a {checkout['type']} checkout.")
    if checkout["type"] == "commit" and not re.fullmatch(r"[0-9a-fA-F]{4,64}", checkout["sha"]):
        raise invalid_request("resources: checkout.sha: must be a hexadecimal commit id.")


def _repository_secret(workspace: Workspace, resource: dict[str, Any], record_id: str) -> dict[str, Any]:
    """The resource's own token, sealed; else the workspace's git credential for the host, by id."""
    if resource.get("authorization_token"):
        return {"sealed_authorization_token": seal(resource["authorization_token"], context=record_id)}
    credential = git_credential_for_url(workspace_id=workspace.pk, url=resource["url"])
    return {"git_credential_id": credential.id} if credential else {}


def _check_mount_paths(records: list[dict[str, Any]]) -> None:
    seen: set[str] = set()
    for record in records:
        path = record["mount_path"]
        if path in seen:
            raise invalid_request(f"resources: two resources mount at {path}; give one another mount_path.")
        seen.add(path)


# -- the live API --------------------------------------------------------------------------------
def find(session: Session, resource_id: str) -> dict[str, Any]:
    for record in session.resources:
        if record["id"] == resource_id:
            return dict(record)
    raise not_found(f"Session {session.pk} has no resource {resource_id}.")


def _locked_live(session: Session) -> Session:
    locked = Session.objects.select_for_update().get(pk=session.pk)
    if locked.status == Session.Status.TERMINATED:
        raise conflict(f"session_terminated: session {session.pk} is terminated; its resources cannot change.")
    return locked


def _save(session: Session) -> None:
    session.save(update_fields=["resources", "updated_at"])


@transaction.atomic
def resource_add(*, session: Session, resource: dict[str, Any]) -> dict[str, Any]:
    locked = _locked_live(session)
    on_worker = work.client_runs_builtin(locked.harness, locked.environment.config)
    (record,) = build_records(locked.workspace, [resource], locked.resources, on_worker=on_worker)
    locked.resources = [*locked.resources, record]
    _save(locked)
    return record


@transaction.atomic
def resource_update(*, session: Session, resource_id: str, authorization_token: str) -> dict[str, Any]:
    """Rotate a repository's token (the only field that changes on a live resource)."""
    locked = _locked_live(session)
    record = find(locked, resource_id)
    if record["type"] != "github_repository":
        raise invalid_request("authorization_token: only github_repository resources have a token to rotate.")
    record.pop("git_credential_id", None)
    record["sealed_authorization_token"] = seal(authorization_token, context=record["id"])
    record["updated_at"] = timezone.now().isoformat()
    locked.resources = [record if item["id"] == resource_id else item for item in locked.resources]
    _save(locked)
    return record


@transaction.atomic
def resource_delete(*, session: Session, resource_id: str) -> None:
    locked = _locked_live(session)
    find(locked, resource_id)
    locked.resources = [item for item in locked.resources if item["id"] != resource_id]
    _save(locked)
