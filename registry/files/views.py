"""File endpoints: upload, retrieve metadata, download content, list, delete."""

from __future__ import annotations

from typing import Any

from django.http import FileResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_view
from rest_framework.parsers import MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response

from registry.core.downloads import AnyAcceptNegotiation, attachment
from registry.core.errors import invalid_request
from registry.core.fields import validated
from registry.core.openapi import LIST_PARAMETERS, list_schema
from registry.core.pagination import KeysetPagination
from registry.core.uploads import file_parts, read_multipart
from registry.core.views import DeleteMixin, WorkspaceViewSet
from registry.files import selectors, services
from registry.files.models import File
from registry.files.serializers import (
    FileDeletedSerializer,
    FileSerializer,
    FileUploadFieldsSerializer,
    FileUploadSerializer,
)

IDS_PARAMETER = OpenApiParameter(
    "ids",
    OpenApiTypes.STR,
    many=True,
    description="Only these files (at most 100; not with page or limit); a single page, unknown ids omitted.",
)


@extend_schema_view(
    create=extend_schema(request={"multipart/form-data": FileUploadSerializer}, responses=FileSerializer),
    retrieve=extend_schema(responses=FileSerializer),
    list=list_schema("FileList", FileSerializer, *LIST_PARAMETERS[:3], IDS_PARAMETER),
    destroy=extend_schema(responses=FileDeletedSerializer),
)
class FileViewSet(DeleteMixin, WorkspaceViewSet):
    """`/v1/files`: multipart uploads up to REGISTRY_MAX_UPLOAD_BYTES (413 beyond), kept in the storage."""

    model = File
    serializer_class = FileSerializer
    parser_classes = [MultiPartParser]
    content_negotiation_class = AnyAcceptNegotiation
    archivable = False

    def create(self, request: Request) -> Response:
        with read_multipart(request) as (fields, parts):
            values = validated(FileUploadFieldsSerializer, fields.dict())
            found = file_parts(parts, "file")
            if len(found) != 1:
                raise invalid_request("file: exactly one file part (with a filename) is required.")
            file = services.file_upload(
                workspace=self.principal.workspace,
                part=found[0],
                expires_in_seconds=values.get("expires_in_seconds"),
            )
        return Response(self.render(file))

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        ids = request.query_params.getlist("ids")
        if not ids:
            return super().list(request, *args, **kwargs)
        if "page" in request.query_params or "limit" in request.query_params:
            raise invalid_request("ids: cannot be combined with page or limit.")
        rows = selectors.files_with_ids(self.get_queryset(), ids)
        return KeysetPagination.response(self.render_many(rows), {"next_page": None})

    @extend_schema(responses={(200, "application/octet-stream"): OpenApiResponse(OpenApiTypes.BINARY)})
    def content(self, request: Request, id: str) -> FileResponse:
        file = self.get_object()
        return attachment(stream=selectors.file_content(file), filename=file.filename, content_type=file.mime_type)

    def perform_delete(self, instance: File) -> None:
        services.file_delete(file=instance)
