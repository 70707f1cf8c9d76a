"""Reads for memory stores: rendering, and the memory list with `path_prefix`/`depth` grouping."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from registry.core.errors import invalid_request, not_found
from registry.core.serialization import timestamp
from registry.memory.models import Memory, MemoryStore, MemoryVersion


def render_store(store: MemoryStore) -> dict[str, Any]:
    return {
        "id": store.id,
        "type": "memory_store",
        "name": store.name,
        "description": store.description,
        "metadata": store.metadata,
        "created_at": timestamp(store.created_at),
        "updated_at": timestamp(store.updated_at),
        "archived_at": timestamp(store.archived_at),
    }


def render_memory(memory: Memory, *, full: bool) -> dict[str, Any]:
    return {
        "id": memory.id,
        "type": "memory",
        "memory_store_id": memory.store_id,
        "memory_version_id": memory.version_id,
        "path": memory.path,
        "content_sha256": memory.content_sha256,
        "content_size_bytes": memory.content_size_bytes,
        "content": memory.content if full else None,
        "created_at": timestamp(memory.created_at),
        "updated_at": timestamp(memory.updated_at),
    }


def render_version(version: MemoryVersion, *, full: bool) -> dict[str, Any]:
    return {
        "id": version.id,
        "type": "memory_version",
        "memory_id": version.memory_id,
        "memory_store_id": version.store_id,
        "operation": version.operation,
        "path": version.path,
        "content": version.content if full else None,
        "content_sha256": version.content_sha256,
        "content_size_bytes": version.content_size_bytes,
        "created_by": version.created_by,
        "created_at": timestamp(version.created_at),
        "redacted_at": timestamp(version.redacted_at),
        "redacted_by": version.redacted_by,
    }


def parse_view(raw: str | None, default: str) -> bool:
    """True for `view=full`."""
    view = raw or default
    if view not in ("basic", "full"):
        raise invalid_request("view: must be 'basic' or 'full'.")
    return view == "full"


def list_items(store: MemoryStore, *, prefix: str, depth: int | None) -> list[tuple[str, str | None]]:
    """(sort key, memory id or None for a `memory_prefix`) for everything under `prefix`, in path order.

    Reads only (id, path) pairs from the (store, path) index; the page's rows are fetched after slicing.
    """
    rows = Memory.objects.filter(store=store, path__startswith=prefix).values_list("path", "id")
    items: dict[str, str | None] = {}
    for path, memory_id in rows:
        segments = path[len(prefix) :].split("/")
        if depth is not None and len(segments) > depth:
            items.setdefault(prefix + "/".join(segments[:depth]) + "/", None)
        else:
            items[path] = memory_id
    return sorted(items.items())


def memories_by_id(ids: list[str]) -> dict[str, Memory]:
    return {memory.id: memory for memory in Memory.objects.filter(pk__in=ids)}


def memory_get(*, store: MemoryStore, memory_id: str) -> Memory:
    memory = Memory.objects.filter(store=store, pk=memory_id).select_related("store").first()
    if memory is None:
        raise not_found(f"Memory {memory_id} not found.")
    return memory


def memory_versions(*, store: MemoryStore) -> QuerySet[MemoryVersion]:
    return MemoryVersion.objects.filter(store=store)


def memory_version_get(*, store: MemoryStore, version_id: str) -> MemoryVersion:
    version = memory_versions(store=store).filter(pk=version_id).first()
    if version is None:
        raise not_found(f"Memory version {version_id} not found.")
    return version
