"""URL patterns of /v1/memory_stores and the memories and versions inside a store."""

from django.urls import path

from registry.core.routing import resource_urls
from registry.memory.views import MemoryStoreViewSet, MemoryVersionViewSet, MemoryViewSet

STORE = "memory_stores/<mems_id:id>"

urlpatterns = [
    *resource_urls("memory_stores", MemoryStoreViewSet, "mems_id", name="memory-store"),
    path(f"{STORE}/memories", MemoryViewSet.as_view({"get": "list", "post": "create"}), name="memories"),
    path(
        f"{STORE}/memories/<mem_id:memory_id>",
        MemoryViewSet.as_view({"get": "retrieve", "post": "partial_update", "delete": "destroy"}),
        name="memory",
    ),
    path(f"{STORE}/memory_versions", MemoryVersionViewSet.as_view({"get": "list"}), name="memory-versions"),
    path(
        f"{STORE}/memory_versions/<memver_id:version_id>",
        MemoryVersionViewSet.as_view({"get": "retrieve"}),
        name="memory-version",
    ),
    path(
        f"{STORE}/memory_versions/<memver_id:version_id>/redact",
        MemoryVersionViewSet.as_view({"post": "redact"}),
        name="memory-version-redact",
    ),
]
