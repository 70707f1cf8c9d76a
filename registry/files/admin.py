"""Django admin for files: metadata only (name, type, size), never the content."""

from django.contrib import admin
from django.http import HttpRequest

from registry.core.admin import ReadOnlyAdmin
from registry.files import services
from registry.files.models import File


@admin.register(File)
class FileAdmin(ReadOnlyAdmin):
    """Files, read-only: uploads go through the API; a deletion here removes the bytes too (the API's service)."""

    list_display = ("id", "filename", "workspace", "mime_type", "size_bytes", "created_at", "expires_at")
    search_fields = ("id", "filename")
    readonly_fields = ("id", "workspace", "filename", "mime_type", "size_bytes", "created_at", "expires_at")
    exclude = ("storage_name",)

    def delete_model(self, request: HttpRequest, obj: File) -> None:
        services.file_delete(file=obj)
