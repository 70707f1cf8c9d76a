"""Deployment endpoints: create, retrieve, update, list, archive, pause, unpause and run (fire now); deployment
run endpoints: retrieve and list. What each action does to `status` and the schedule: see the package docstring."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework.request import Request
from rest_framework.response import Response

from registry.core.errors import invalid_request
from registry.core.openapi import LIST_PARAMETERS, list_schema
from registry.core.pagination import KeysetPagination
from registry.core.views import WorkspaceViewSet, WriteMixin, WriteServices, object_action, parse_bool
from registry.deployments import services
from registry.deployments.filters import DeploymentFilter, DeploymentRunFilter
from registry.deployments.models import Deployment, DeploymentRun
from registry.deployments.serializers import (
    DeploymentRunSerializer,
    DeploymentSerializer,
    DeploymentUpdateSerializer,
    DeploymentWriteSerializer,
)

ACTIONS = ("pause", "unpause", "run")
RUNS_MAX_LIMIT = 1000


class DeploymentViewSet(WriteMixin, WorkspaceViewSet):
    model = Deployment
    serializer_class = DeploymentSerializer
    filterset_class = DeploymentFilter
    write_serializer = DeploymentWriteSerializer
    update_serializer = DeploymentUpdateSerializer
    write_services = WriteServices(services.deployment_create, services.deployment_update, "deployment")

    def list_queryset(self) -> QuerySet[Any]:
        params = self.request.query_params
        if params.get("status") and parse_bool(params.get("include_archived"), "include_archived"):
            raise invalid_request("status: cannot be combined with include_archived (archived deployments have none).")
        return super().list_queryset()

    archive = object_action(services.deployment_archive, "deployment")
    pause = object_action(services.deployment_pause, "deployment")
    unpause = object_action(services.deployment_unpause, "deployment")

    @extend_schema(request=None, responses=DeploymentRunSerializer)
    def run(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return Response(DeploymentRunSerializer.render(services.deployment_run(deployment=self.get_object())))


@extend_schema_view(
    retrieve=extend_schema(responses=DeploymentRunSerializer),
    list=list_schema(
        "DeploymentRunList",
        DeploymentRunSerializer,
        OpenApiParameter("limit", OpenApiTypes.INT, description=f"Page size, 1 to {RUNS_MAX_LIMIT} (default 20)."),
        *LIST_PARAMETERS[1:3],
    ),
)
class DeploymentRunViewSet(WorkspaceViewSet):
    """`/v1/deployment_runs`: every fire of the workspace's deployments, newest first."""

    model = DeploymentRun
    serializer_class = DeploymentRunSerializer
    filterset_class = DeploymentRunFilter
    archivable = False
    pagination = KeysetPagination(max_limit=RUNS_MAX_LIMIT)
