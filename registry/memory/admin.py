"""Django admin for memory stores (memories are read through the API; versions are audit records)."""

from django.contrib import admin

from registry.memory.models import MemoryStore


@admin.register(MemoryStore)
class MemoryStoreAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("id", "name", "workspace", "created_at", "archived_at")
    search_fields = ("id", "name")
    readonly_fields = ("id", "created_at", "updated_at")
