"""Django admin for memory stores (memories are read through the API; versions are audit records). Writes go
through the API's serializer and services."""

from django.contrib import admin

from registry.core.admin import ArchivableAdmin, ServiceWriteAdmin
from registry.core.views import WriteServices
from registry.memory import services
from registry.memory.models import MemoryStore
from registry.memory.serializers import MemoryStoreWriteSerializer


@admin.register(MemoryStore)
class MemoryStoreAdmin(ServiceWriteAdmin, ArchivableAdmin):
    list_display = ("id", "name", "workspace", "created_at", "archived_at")
    list_select_related = ("workspace",)
    search_fields = ("id", "name")
    fields = ("id", "workspace", "name", "description", "metadata", "created_at", "updated_at", "archived_at")
    readonly_fields = ("id", "created_at", "updated_at")
    write_serializer = MemoryStoreWriteSerializer
    write_services = WriteServices(services.memory_store_create, services.memory_store_update, "store")
