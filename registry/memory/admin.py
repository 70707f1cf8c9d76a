"""Django admin for memory stores: a store's page shows its memories (path, size, update time, content) with
each one's latest versions, read-only (memories change through the API; versions are audit records). Writes of
the store go through the API's serializer and services."""

from typing import Any

from django.contrib import admin
from django.template.loader import render_to_string
from django.utils.safestring import SafeString

from registry.core.admin import ArchivableAdmin, ServiceWriteAdmin
from registry.core.admin_reading import ReadingStyles
from registry.core.views import WriteServices
from registry.memory import selectors, services
from registry.memory.models import MemoryStore
from registry.memory.serializers import MemoryStoreWriteSerializer

MEMORIES_SHOWN = 50
VERSIONS_SHOWN = 10  # of each memory, the latest


@admin.register(MemoryStore)
class MemoryStoreAdmin(ReadingStyles, ServiceWriteAdmin, ArchivableAdmin):
    list_display = ("id", "name", "workspace", "created_at", "archived_at")
    list_select_related = ("workspace",)
    search_fields = ("id", "name")
    fields = ("id", "workspace", "name", "description", "metadata", "created_at", "updated_at", "archived_at")
    readonly_fields = ("id", "created_at", "updated_at")
    write_serializer = MemoryStoreWriteSerializer
    write_services = WriteServices(services.memory_store_create, services.memory_store_update, "store")

    def archive_one(self, obj: MemoryStore) -> None:
        services.memory_store_archive(store=obj)  # as the API's archive and delete: with their webhook event

    def delete_model(self, request: Any, obj: MemoryStore) -> None:
        services.memory_store_delete(store=obj)

    def get_fields(self, request: Any, obj: MemoryStore | None = None) -> Any:
        fields = tuple(super().get_fields(request, obj))
        return fields if obj is None else (*fields, "memories")

    def get_readonly_fields(self, request: Any, obj: MemoryStore | None = None) -> Any:
        fields = tuple(super().get_readonly_fields(request, obj))
        return fields if obj is None else (*fields, "memories")

    @admin.display(description="memories")
    def memories(self, store: MemoryStore) -> SafeString:
        shown, total = selectors.memories_with_versions(
            store=store, memories=MEMORIES_SHOWN, versions_each=VERSIONS_SHOWN
        )
        context = {"memories": shown, "total": total, "versions_each": VERSIONS_SHOWN}
        return render_to_string("admin/reading/memories.html", context)
