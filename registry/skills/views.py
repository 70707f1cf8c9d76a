"""Skill endpoints: create, retrieve, list, delete; versions: create, retrieve, list, delete, content."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.http import FileResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import exceptions, serializers
from rest_framework.parsers import MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response

from registry.core.callers import WORK_SECRET
from registry.core.downloads import AnyAcceptNegotiation, attachment
from registry.core.fields import validated
from registry.core.openapi import LIST_PARAMETERS, list_schema
from registry.core.pagination import KeysetPagination
from registry.core.uploads import file_parts, read_multipart
from registry.core.views import DeleteMixin, WorkspaceViewSet
from registry.skills import selectors, services
from registry.skills.bundles import Bundle, parse_bundle
from registry.skills.filters import SkillFilter
from registry.skills.models import Skill, SkillVersion
from registry.skills.serializers import (
    SOURCES,
    SkillCreateFieldsSerializer,
    SkillDeletedSerializer,
    SkillSerializer,
    SkillUploadSerializer,
    SkillVersionDeletedSerializer,
    SkillVersionFieldsSerializer,
    SkillVersionSerializer,
)
from registry.workspaces.scoped_credentials import session_grants

UPLOAD = {"multipart/form-data": SkillUploadSerializer}
SOURCE_PARAMETER = OpenApiParameter("source", OpenApiTypes.STR, enum=list(SOURCES), description="Only this source.")
VERSION_PARAMETER = OpenApiParameter(
    "version", OpenApiTypes.STR, OpenApiParameter.PATH, description="A version id, or `latest`."
)


@contextmanager
def read_upload(
    request: Request, fields_serializer: type[serializers.Serializer[Any]]
) -> Iterator[tuple[dict[str, Any], Bundle]]:
    """The validated form fields and bundle of a skill upload (`files` parts, paths as their filenames)."""
    with read_multipart(request) as (fields, parts):
        values = validated(fields_serializer, fields.dict())
        yield values, parse_bundle(file_parts(parts, "files", "files[]"))


@extend_schema_view(
    create=extend_schema(request=UPLOAD, responses=SkillSerializer),
    retrieve=extend_schema(responses=SkillSerializer),
    list=list_schema("SkillList", SkillSerializer, *LIST_PARAMETERS[:3], SOURCE_PARAMETER),
    destroy=extend_schema(responses=SkillDeletedSerializer),
)
class SkillViewSet(DeleteMixin, WorkspaceViewSet):
    """`/v1/skills`: custom skills, created from an uploaded bundle (its first version)."""

    model = Skill
    serializer_class = SkillSerializer
    filterset_class = SkillFilter
    parser_classes = [MultiPartParser]
    archivable = False

    def create(self, request: Request) -> Response:
        with read_upload(request, SkillCreateFieldsSerializer) as (fields, bundle):
            skill = services.skill_create(
                workspace=self.principal.workspace, bundle=bundle, display_name=fields.get("display_name")
            )
        return Response(self.render(skill))

    def perform_delete(self, instance: Skill) -> None:
        services.skill_delete(skill=instance)


@extend_schema_view(
    create=extend_schema(request=UPLOAD, responses=SkillVersionSerializer),
    list=list_schema("SkillVersionList", SkillVersionSerializer, *LIST_PARAMETERS[:3]),
    retrieve=extend_schema(parameters=[VERSION_PARAMETER], responses=SkillVersionSerializer),
    destroy=extend_schema(parameters=[VERSION_PARAMETER], responses=SkillVersionDeletedSerializer),
)
class SkillVersionViewSet(WorkspaceViewSet):
    """`/v1/skills/{id}/versions`: a skill's versions, newest first; `content` is a zip of one bundle."""

    model = Skill
    resource_type = "skill"
    operation_name = "skill_version"
    serializer_class = SkillVersionSerializer
    parser_classes = [MultiPartParser]
    content_negotiation_class = AnyAcceptNegotiation
    archivable = False
    pagination = KeysetPagination(keys=("version",))
    # A work item's secret reads the skills of its session's agent, as the reference client's worker does.
    accepts_scoped_credentials = (WORK_SECRET,)
    scoped_actions = frozenset({"retrieve", "content"})

    def get_object(self) -> Skill:
        if self.principal.is_scoped and self.kwargs["id"] not in session_grants(self.principal).skill_ids:
            raise exceptions.PermissionDenied("This credential may read only the skills of its session's agent.")
        skill: Skill = super().get_object()
        return skill

    def version(self) -> SkillVersion:
        return selectors.skill_version_get(skill=self.get_object(), version=self.kwargs["version"])

    def create(self, request: Request, id: str) -> Response:
        skill = self.get_object()
        with read_upload(request, SkillVersionFieldsSerializer) as (_, bundle):
            version = services.skill_version_create(skill=skill, bundle=bundle)
        return Response(self.render(version))

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        rows, links = self.pagination.paginate(selectors.skill_versions(skill=self.get_object()), request)
        return KeysetPagination.response(self.render_many(rows), links)

    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return Response(self.render(self.version()))

    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        version = self.version()
        services.skill_version_delete(version=version)
        return Response({"id": version.version, "type": "skill_version_deleted"})

    @extend_schema(
        parameters=[VERSION_PARAMETER], responses={(200, "application/zip"): OpenApiResponse(OpenApiTypes.BINARY)}
    )
    def content(self, request: Request, *args: Any, **kwargs: Any) -> FileResponse:
        version = self.version()
        return attachment(
            stream=selectors.skill_version_archive(version=version),
            filename=f"{version.name}.zip",
            content_type="application/zip",
        )
