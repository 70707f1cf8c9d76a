"""Agent endpoints: create, retrieve (`?version=N`), update (new version), list, versions, archive."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework.request import Request
from rest_framework.response import Response

from registry.agents import selectors, services
from registry.agents.filters import AgentFilter
from registry.agents.models import Agent
from registry.agents.serializers import AgentSerializer, AgentWriteSerializer
from registry.core.errors import invalid_request
from registry.core.openapi import LIST_PARAMETERS, list_schema
from registry.core.pagination import KeysetPagination
from registry.core.views import WorkspaceViewSet, WriteMixin, WriteServices, object_action

VERSION_PARAMETER = OpenApiParameter("version", OpenApiTypes.INT, description="Read this version of the agent.")


@extend_schema_view(retrieve=extend_schema(parameters=[VERSION_PARAMETER], responses=AgentSerializer))
class AgentViewSet(WriteMixin, WorkspaceViewSet):
    model = Agent
    serializer_class = AgentSerializer
    filterset_class = AgentFilter
    write_serializer = AgentWriteSerializer
    write_services = WriteServices(services.agent_create, services.agent_update, "agent")

    archive = object_action(services.agent_archive, "agent")

    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        agent = self.get_object()
        raw_version = request.query_params.get("version")
        if raw_version in (None, ""):
            return Response(self.render(agent))
        if not raw_version.isdigit() or int(raw_version) < 1:
            raise invalid_request("version: must be a positive integer.")
        version = selectors.agent_version_get(agent=agent, version=int(raw_version))
        return Response(AgentSerializer.render(agent, version))


class AgentVersionViewSet(WorkspaceViewSet):
    """`GET /v1/agents/{id}/versions`: every version of one agent, newest first."""

    model = Agent
    resource_type = "agent"
    operation_name = "agent_version"
    archivable = False
    pagination = KeysetPagination(keys=("version",))

    @list_schema("AgentVersionList", AgentSerializer, *LIST_PARAMETERS[:3])
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        agent = self.get_object()
        rows, links = self.pagination.paginate(selectors.agent_versions(agent=agent), request)
        return KeysetPagination.response([AgentSerializer.render(agent, version) for version in rows], links)
