"""Reads for memory stores: the `view` parameter, lookups, and the memory list with `path_prefix`/`depth`
grouping."""

from __future__ import annotations

from django.db.models import F, QuerySet, Window
from django.db.models.functions import RowNumber

from registry.core.errors import invalid_request, not_found
from registry.memory.models import Memory, MemoryStore, MemoryVersion


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


def store_digests(store_id: str) -> dict[str, str]:
    """Each memory's path and content digest, for a sync of the store."""
    return dict(Memory.objects.filter(store_id=store_id).values_list("path", "content_sha256"))


def contents_at(store_id: str, paths: list[str]) -> list[tuple[str, str]]:
    """The path and content of the store's memories at `paths`."""
    return list(Memory.objects.filter(store_id=store_id, path__in=paths).values_list("path", "content"))


def store_by_id(store_id: str) -> MemoryStore:
    return MemoryStore.objects.get(pk=store_id)


def memory_at(*, store: MemoryStore, path: str) -> Memory | None:
    return Memory.objects.filter(store=store, path=path).first()


def memories_with_versions(
    *, store: MemoryStore, memories: int, versions_each: int
) -> tuple[list[tuple[Memory, list[MemoryVersion]]], int]:
    """The first `memories` of the store's memories by path, each with its latest `versions_each` versions
    (newest first), and how many memories the store holds."""
    live = Memory.objects.filter(store=store)
    shown = list(live.order_by("path")[:memories])
    versions: dict[str, list[MemoryVersion]] = {memory.id: [] for memory in shown}
    newest_first = (F("created_at").desc(), F("id").desc())
    rank = Window(RowNumber(), partition_by=F("memory_id"), order_by=newest_first)
    history = memory_versions(store=store).filter(memory_id__in=list(versions)).annotate(rank=rank)
    for version in history.filter(rank__lte=versions_each).order_by(*newest_first):
        versions[version.memory_id].append(version)
    return [(memory, versions[memory.id]) for memory in shown], live.count()
