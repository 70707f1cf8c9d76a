"""Writes for memory stores and memories. Every change of a memory records a MemoryVersion; a store's
creation, archive and deletion write their webhook event (`memory_store.*`) in their transaction.

Concurrency: updates and deletes lock the memory row, so two writers racing with the same
precondition serialize and exactly one wins; paths are unique per store by a constraint.
"""

from __future__ import annotations

import hashlib
import unicodedata
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from registry.core.callers import Caller
from registry.core.errors import ApiError, ErrorType, conflict, invalid_request
from registry.core.services import apply_updates, resource_archive
from registry.memory.models import Memory, MemoryStore, MemoryVersion
from registry.webhooks import outbox
from registry.workspaces.models import Workspace

# What a memory may be, checked by the API and by the runtime's sync of a memory folder.
MAX_PATH_BYTES = 1024
MAX_SEGMENTS = 20
MAX_CONTENT_BYTES = 102_400
FORBIDDEN_CATEGORIES = {"Cc", "Cf", "Zl", "Zp"}


def path_problem(path: str) -> str | None:
    """Why `path` is not a valid memory path, or None."""
    if not path.startswith("/"):
        return "must start with '/'."
    if unicodedata.normalize("NFC", path) != path:
        return "must be in Unicode Normalization Form C."
    if len(path.encode()) > MAX_PATH_BYTES:
        return f"must be at most {MAX_PATH_BYTES} bytes."
    if any(unicodedata.category(character) in FORBIDDEN_CATEGORIES for character in path):
        return "must not contain control, format or separator characters."
    segments = path[1:].split("/")
    if not 1 <= len(segments) <= MAX_SEGMENTS:
        return f"must have 1 to {MAX_SEGMENTS} segments."
    if any(segment in ("", ".", "..") for segment in segments):
        return "segments must not be empty, '.' or '..'."
    return None


def actor_of(caller: Caller) -> dict[str, str]:
    """Who made a change, as the reference client's actor objects."""
    if caller.credential_kind == "api_key":
        return {"type": "api_actor", "api_key_id": caller.subject}
    if caller.credential_kind == "work_secret" and caller.session_id:
        return {"type": "session_actor", "session_id": caller.session_id}
    return {"type": "user_actor", "user_id": caller.subject}


def sha256_of(content: str) -> str:
    return hashlib.sha256(content.encode()).hexdigest()


def precondition_failed(message: str) -> ApiError:
    return ApiError(ErrorType.MEMORY_PRECONDITION_FAILED, message)


# -- stores ---------------------------------------------------------------------------------------
@transaction.atomic
def memory_store_create(*, workspace: Workspace, values: dict[str, Any]) -> MemoryStore:
    store = MemoryStore.objects.create(
        workspace=workspace,
        name=values["name"],
        description=values.get("description") or "",
        metadata=values.get("metadata", {}),
    )
    outbox.emit("memory_store.created", workspace_id=workspace.pk, object_id=store.pk)
    return store


@transaction.atomic
def memory_store_update(*, store: MemoryStore, values: dict[str, Any]) -> MemoryStore:
    locked = _writable_store(store)
    apply_updates(locked, values, ("name", "description"))
    locked.description = locked.description or ""
    locked.save()
    return locked


@transaction.atomic
def memory_store_archive(*, store: MemoryStore) -> MemoryStore:
    """Archive once (archiving an archived store answers it again); its memories become read-only."""
    locked = MemoryStore.objects.select_for_update().get(pk=store.pk)
    if locked.archived_at is None:
        resource_archive(instance=locked)
        outbox.emit("memory_store.archived", workspace_id=locked.workspace_id, object_id=locked.pk)
    return locked


@transaction.atomic
def memory_store_delete(*, store: MemoryStore) -> None:
    """Delete the store with its memories and their versions."""
    store_id, workspace_id = store.pk, store.workspace_id
    store.delete()
    outbox.emit("memory_store.deleted", workspace_id=workspace_id, object_id=store_id)


def _writable_store(store: MemoryStore) -> MemoryStore:
    locked = MemoryStore.objects.select_for_update().get(pk=store.pk)
    if locked.archived_at is not None:
        raise invalid_request(f"Memory store {store.pk} is archived; its memories are read-only.")
    return locked


# -- memories ---------------------------------------------------------------------------------------
def _record(memory: Memory, operation: str, actor: dict[str, str]) -> MemoryVersion:
    deleted = operation == MemoryVersion.Operation.DELETED
    return MemoryVersion.objects.create(
        store_id=memory.store_id,
        memory_id=memory.id,
        operation=operation,
        path=memory.path,
        content=None if deleted else memory.content,
        content_sha256=None if deleted else memory.content_sha256,
        content_size_bytes=None if deleted else memory.content_size_bytes,
        created_by=actor,
    )


def _set_content(memory: Memory, content: str) -> None:
    memory.content = content
    memory.content_sha256 = sha256_of(content)
    memory.content_size_bytes = len(content.encode())


@transaction.atomic
def memory_create(*, store: MemoryStore, path: str, content: str, actor: dict[str, str]) -> Memory:
    _writable_store(store)
    memory = Memory(store=store, path=path)
    _set_content(memory, content)
    try:
        with transaction.atomic():
            memory.save(force_insert=True)
    except IntegrityError:
        raise conflict(f"path: a memory already exists at {path}.") from None
    version = _record(memory, MemoryVersion.Operation.CREATED, actor)
    Memory.objects.filter(pk=memory.pk).update(version_id=version.id)
    memory.version_id = version.id
    return memory


@transaction.atomic
def memory_update(*, memory: Memory, values: dict[str, Any], actor: dict[str, str]) -> Memory:
    """Change content and/or path; a `content_sha256` precondition must match the stored content,
    unless the stored state already equals what the request asks for."""
    _writable_store(memory.store)
    locked = Memory.objects.select_for_update().get(pk=memory.pk)
    new_path = values.get("path") or locked.path
    new_content = values["content"] if values.get("content") is not None else locked.content
    unchanged = new_path == locked.path and new_content == locked.content
    precondition = values.get("precondition")
    if precondition and precondition["content_sha256"] != locked.content_sha256 and not unchanged:
        raise precondition_failed("precondition: the memory's content_sha256 does not match; it changed.")
    if unchanged:
        return locked
    locked.path = new_path
    _set_content(locked, new_content)
    try:
        with transaction.atomic():
            locked.save()
    except IntegrityError:
        raise conflict(f"path: a memory already exists at {new_path}.") from None
    locked.version_id = _record(locked, MemoryVersion.Operation.MODIFIED, actor).id
    Memory.objects.filter(pk=locked.pk).update(version_id=locked.version_id)
    return locked


@transaction.atomic
def memory_delete(*, memory: Memory, expected_sha256: str | None, actor: dict[str, str]) -> None:
    _writable_store(memory.store)
    locked = Memory.objects.select_for_update().get(pk=memory.pk)
    if expected_sha256 is not None and expected_sha256 != locked.content_sha256:
        raise precondition_failed("expected_content_sha256: the memory's content changed; nothing was deleted.")
    _record(locked, MemoryVersion.Operation.DELETED, actor)
    locked.delete()


@transaction.atomic
def memory_version_redact(*, version: MemoryVersion, actor: dict[str, str]) -> MemoryVersion:
    """Clear a version's content and path for good; the record of the change stays."""
    locked = MemoryVersion.objects.select_for_update().get(pk=version.pk)
    current = Memory.objects.filter(pk=locked.memory_id, version_id=locked.id).exists()
    if current:
        raise conflict("This version holds the memory's current content; change or delete the memory first.")
    if locked.redacted_at is None:
        locked.path = locked.content = locked.content_sha256 = None
        locked.content_size_bytes = None
        locked.redacted_at = timezone.now()
        locked.redacted_by = actor
        locked.save()
    return locked
