"""Django admin for files: metadata (name, type, size) and a preview (a raster image inline, the head of a text
file, anything else by type and size), with the bytes served to staff through the admin's own view (`<id>/content/`,
scoped to the staff member's workspaces like the page)."""

from __future__ import annotations

from functools import partial

from django.contrib import admin
from django.contrib.admin.utils import quote, unquote
from django.http import FileResponse, Http404, HttpRequest
from django.template.loader import render_to_string
from django.urls import URLPattern, path, reverse
from django.utils.safestring import SafeString

from registry.core.admin import ReadOnlyAdmin
from registry.core.admin_reading import ReadingStyles, served, shown_inline, text_preview, viewable
from registry.files import selectors, services
from registry.files.models import File


def content_url(file: File) -> str:
    return reverse("admin:files_file_content", args=[quote(file.pk)])


@admin.register(File)
class FileAdmin(ReadingStyles, ReadOnlyAdmin):
    """Files, read-only: uploads go through the API; a deletion here removes the bytes too (the API's service)."""

    list_display = ("id", "filename", "workspace", "mime_type", "size_bytes", "created_at", "expires_at")
    search_fields = ("id", "filename")
    fields = ("id", "workspace", "filename", "mime_type", "size_bytes", "created_at", "expires_at", "preview")
    readonly_fields = fields

    def delete_model(self, request: HttpRequest, obj: File) -> None:
        services.file_delete(file=obj)

    @admin.display(description="preview")
    def preview(self, file: File) -> SafeString:
        context = {"file": file, "url": content_url(file), "expired": file.expired, "image": False, "text": None}
        if not file.expired:
            context["image"] = shown_inline(file.mime_type)
            if not context["image"]:
                context["text"] = text_preview(partial(selectors.file_content, file), file.size_bytes)
        return render_to_string("admin/reading/file_preview.html", context)

    def get_urls(self) -> list[URLPattern]:
        content = path(
            "<path:object_id>/content/", self.admin_site.admin_view(self.content_view), name="files_file_content"
        )
        return [content, *super().get_urls()]

    def content_view(self, request: HttpRequest, object_id: str) -> FileResponse:
        """The file's bytes for whoever may view its page: a raster image inline, anything else (and any file
        with `?download=1`) as an attachment."""
        file = viewable(self, request, unquote(object_id))
        if file.expired:
            raise Http404
        stream = selectors.file_content(file)
        download = request.GET.get("download") == "1"
        return served(stream, filename=file.filename, content_type=file.mime_type, download=download)
