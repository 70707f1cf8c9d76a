"""Discovery and health endpoints. Health needs no credential; discovery does."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from registry.core.errors import ErrorType, error_body, not_found, request_id_of
from registry.discovery import selectors

DOCUMENT = OpenApiResponse(description="A discovery document.")


class HealthzView(APIView):
    """Liveness: the process is up."""

    authentication_classes: list[Any] = []
    permission_classes = [AllowAny]

    @extend_schema(responses={200: OpenApiResponse(description="The process is up.")})
    def get(self, request: Request) -> Response:
        return Response({"status": "ok"})


class ReadyzView(APIView):
    """Readiness: the database is reachable and migrated."""

    authentication_classes: list[Any] = []
    permission_classes = [AllowAny]

    @extend_schema(
        responses={200: OpenApiResponse(description="Ready."), 503: OpenApiResponse(description="Not ready.")}
    )
    def get(self, request: Request) -> Response:
        problem = selectors.readiness_problem()
        if problem is None:
            return Response({"status": "ready"})
        return Response(error_body(ErrorType.OVERLOADED, f"not ready: {problem}", request_id_of(request)), status=503)


class ApiVersionsView(APIView):
    """`GET /api`: the core API versions."""

    @extend_schema(responses=DOCUMENT)
    def get(self, request: Request) -> Response:
        return Response(selectors.api_versions())


class CoreResourcesView(APIView):
    """`GET /api/v1`: the core resources."""

    @extend_schema(responses=DOCUMENT)
    def get(self, request: Request) -> Response:
        return Response(selectors.core_resource_list())


class ApiGroupsView(APIView):
    """`GET /apis`: exactly the extension groups this deployment serves."""

    @extend_schema(responses=DOCUMENT)
    def get(self, request: Request) -> Response:
        return Response(selectors.api_group_list())


class ApiGroupView(APIView):
    """`GET /apis/<group>/v1`: one group's resources, 404 when it is not served."""

    @extend_schema(responses=DOCUMENT)
    def get(self, request: Request, group: str) -> Response:
        document = selectors.api_resource_list(group)
        if document is None:
            raise not_found(f"API group {group} is not served by this deployment.")
        return Response(document)
