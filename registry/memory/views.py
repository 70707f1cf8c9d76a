"""Memory store endpoints, and the memories and memory versions inside a store."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, serializers
from rest_framework.request import Request
from rest_framework.response import Response

from registry.core.callers import WORK_SECRET
from registry.core.errors import flatten_validation_detail, invalid_request
from registry.core.fields import validated
from registry.core.openapi import LIST_PARAMETERS, deleted_response, list_schema
from registry.core.pagination import KeysetPagination, decode_cursor_token, encode_cursor_token, parse_limit
from registry.core.views import DeleteMixin, WorkspaceViewSet, WriteMixin, WriteServices, object_action
from registry.memory import selectors, services
from registry.memory.filters import MemoryStoreFilter, MemoryVersionFilter
from registry.memory.models import Memory, MemoryStore, MemoryVersion
from registry.memory.serializers import (
    MemoryCreateSerializer,
    MemorySerializer,
    MemoryStoreSerializer,
    MemoryStoreWriteSerializer,
    MemoryUpdateSerializer,
    MemoryVersionSerializer,
    validate_path,
)
from registry.workspaces.scoped_credentials import session_grants

VIEW = OpenApiParameter("view", OpenApiTypes.STR, enum=["basic", "full"])
PATH_PREFIX = OpenApiParameter("path_prefix", OpenApiTypes.STR)
DEPTH = OpenApiParameter("depth", OpenApiTypes.INT)
MEMORY_ID = OpenApiParameter("memory_id", OpenApiTypes.STR)
OPERATION = OpenApiParameter("operation", OpenApiTypes.STR)
FULL_VIEW_PAGE_LIMIT = 20


class MemoryStoreViewSet(WriteMixin, DeleteMixin, WorkspaceViewSet):
    model = MemoryStore
    serializer_class = MemoryStoreSerializer
    filterset_class = MemoryStoreFilter
    write_serializer = MemoryStoreWriteSerializer
    write_services = WriteServices(services.memory_store_create, services.memory_store_update, "store")

    archive = object_action(services.memory_store_archive, "store")

    def perform_delete(self, instance: MemoryStore) -> None:
        services.memory_store_delete(store=instance)


class StoreContentsViewSet(WorkspaceViewSet):
    """Base for endpoints under `/v1/memory_stores/{id}/...`: the store is resolved in the caller's workspace."""

    model = MemoryStore
    resource_type = "memory_store"
    archivable = False

    def store(self) -> MemoryStore:
        return self.get_object()

    @property
    def actor(self) -> dict[str, str]:
        return services.actor_of(self.principal)

    def full_view(self, default: str) -> bool:
        """`view`: True for `full`, `default` when omitted."""
        return selectors.parse_view(self.request.query_params.get("view"), default)


class MemoryViewSet(StoreContentsViewSet):
    """Memories: create, list (path_prefix, depth, view), retrieve, update (precondition), delete.

    A work item's secret reaches the memory stores attached to its session, as the reference client's
    worker does: it reads them, and writes those attached `read_write`."""

    operation_name = "memory"
    accepts_scoped_credentials = (WORK_SECRET,)

    def get_object(self) -> MemoryStore:
        if self.principal.is_scoped:
            access = session_grants(self.principal).memory_stores.get(self.kwargs["id"])
            if access is None:
                raise exceptions.PermissionDenied("This credential may reach only its session's memory stores.")
            if access != "read_write" and self.action not in ("list", "retrieve"):
                raise exceptions.PermissionDenied("This memory store is attached to the session read-only.")
        store: MemoryStore = super().get_object()
        return store

    def memory(self) -> Memory:
        return selectors.memory_get(store=self.store(), memory_id=self.kwargs["memory_id"])

    @extend_schema(request=MemoryCreateSerializer, responses=MemorySerializer)
    def create(self, request: Request, id: str) -> Response:
        values = validated(MemoryCreateSerializer, request.data)
        memory = services.memory_create(
            store=self.store(), path=values["path"], content=values["content"] or "", actor=self.actor
        )
        return Response(MemorySerializer.render(memory, full=values.get("view") == "full"))

    @extend_schema(parameters=[VIEW], responses=MemorySerializer)
    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        full = self.full_view("full")
        return Response(MemorySerializer.render(self.memory(), full=full))

    @extend_schema(request=MemoryUpdateSerializer, responses=MemorySerializer)
    def partial_update(self, request: Request, id: str, memory_id: str) -> Response:
        memory = self.memory()
        values = validated(MemoryUpdateSerializer, request.data)
        updated = services.memory_update(memory=memory, values=values, actor=self.actor)
        return Response(MemorySerializer.render(updated, full=values.get("view") == "full"))

    @extend_schema(
        parameters=[OpenApiParameter("expected_content_sha256", OpenApiTypes.STR)], responses=deleted_response("memory")
    )
    def destroy(self, request: Request, id: str, memory_id: str) -> Response:
        memory = self.memory()
        services.memory_delete(
            memory=memory, expected_sha256=request.query_params.get("expected_content_sha256"), actor=self.actor
        )
        return Response({"id": memory_id, "type": "memory_deleted"})

    @list_schema("MemoryList", MemorySerializer, *LIST_PARAMETERS[:2], VIEW, PATH_PREFIX, DEPTH)
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        params = request.query_params
        full = self.full_view("basic")
        limit = parse_limit(params.get("limit"))
        if full and limit > FULL_VIEW_PAGE_LIMIT:
            raise invalid_request(f"limit: with view=full a page holds at most {FULL_VIEW_PAGE_LIMIT} items.")
        prefix, depth = self.prefix_and_depth(params.get("path_prefix"), params.get("depth"))
        after = decode_cursor_token(params["page"]) if params.get("page") else None
        items = [
            item
            for item in selectors.list_items(self.store(), prefix=prefix, depth=depth)
            if after is None or item[0] > after
        ]
        page = items[:limit]
        rows = selectors.memories_by_id([memory_id for _, memory_id in page if memory_id])
        data = [
            MemorySerializer.render(rows[memory_id], full=full) if memory_id else {"type": "memory_prefix", "path": key}
            for key, memory_id in page
        ]
        next_page = encode_cursor_token(page[-1][0]) if len(items) > limit else None
        return Response({"data": data, "next_page": next_page})

    @staticmethod
    def prefix_and_depth(raw_prefix: str | None, raw_depth: str | None) -> tuple[str, int | None]:
        prefix = raw_prefix or "/"
        if prefix != "/":
            if not prefix.endswith("/"):
                raise invalid_request("path_prefix: must end with '/'.")
            try:
                validate_path(prefix[:-1])
            except serializers.ValidationError as error:
                raise invalid_request(f"path_prefix: {flatten_validation_detail(error.detail)[0]}") from None
        if raw_depth in (None, ""):
            return prefix, None
        if not raw_depth.isdigit() or int(raw_depth) < 1:
            raise invalid_request("depth: must be a positive integer.")
        return prefix, int(raw_depth)


class MemoryVersionViewSet(StoreContentsViewSet):
    """The version history of a store's memories: list, retrieve, redact."""

    operation_name = "memory_version"
    pagination = KeysetPagination()

    def version(self) -> MemoryVersion:
        return selectors.memory_version_get(store=self.store(), version_id=self.kwargs["version_id"])

    @list_schema("MemoryVersionList", MemoryVersionSerializer, *LIST_PARAMETERS[:3], VIEW, MEMORY_ID, OPERATION)
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        full = self.full_view("basic")
        versions = MemoryVersionFilter(request.query_params, queryset=selectors.memory_versions(store=self.store()))
        if not versions.is_valid():
            raise serializers.ValidationError(versions.errors)
        rows, links = self.pagination.paginate(versions.qs, request)
        return KeysetPagination.response([MemoryVersionSerializer.render(row, full=full) for row in rows], links)

    @extend_schema(parameters=[VIEW], responses=MemoryVersionSerializer)
    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        full = self.full_view("full")
        return Response(MemoryVersionSerializer.render(self.version(), full=full))

    @extend_schema(request=None, responses=MemoryVersionSerializer)
    def redact(self, request: Request, id: str, version_id: str) -> Response:
        version = services.memory_version_redact(version=self.version(), actor=self.actor)
        return Response(MemoryVersionSerializer.render(version, full=True))
