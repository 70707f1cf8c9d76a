"""URL patterns of /v1/files."""

from django.urls import path

from registry.core.routing import resource_urls
from registry.files.views import FileViewSet

urlpatterns = [
    *resource_urls("files", FileViewSet, "file_id", name="file"),
    path("files/<file_id:id>/content", FileViewSet.as_view({"get": "content"}), name="file-content"),
]
