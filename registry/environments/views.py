"""Environment endpoints: create, retrieve, update, list, archive, delete."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, extend_schema_view, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from registry.core.openapi import LIST_PARAMETERS, list_response
from registry.core.views import DeleteMixin, WorkspaceViewSet
from registry.environments import services
from registry.environments.models import Environment
from registry.environments.selectors import render_environment
from registry.environments.serializers import (
    EnvironmentSerializer,
    EnvironmentWriteSerializer,
)


@extend_schema_view(
    create=extend_schema(request=EnvironmentWriteSerializer, responses=EnvironmentSerializer),
    partial_update=extend_schema(request=EnvironmentWriteSerializer, responses=EnvironmentSerializer),
    retrieve=extend_schema(responses=EnvironmentSerializer),
    list=extend_schema(parameters=LIST_PARAMETERS, responses=list_response("EnvironmentList", EnvironmentSerializer)),
    destroy=extend_schema(
        responses=inline_serializer(
            "EnvironmentDeleted",
            {"id": serializers.CharField(), "type": serializers.ChoiceField(choices=["environment_deleted"])},
        )
    ),
)
class EnvironmentViewSet(DeleteMixin, WorkspaceViewSet):
    model = Environment
    resource_type = "environment"
    render_object = staticmethod(render_environment)
    serializer_class = EnvironmentSerializer

    def create(self, request: Request) -> Response:
        body = EnvironmentWriteSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        environment = services.environment_create(workspace=self.principal.workspace, values=dict(body.validated_data))
        return Response(self.render(environment))

    def partial_update(self, request: Request, id: str) -> Response:
        environment = self.get_object()
        body = EnvironmentWriteSerializer(data=request.data, partial=True)
        body.is_valid(raise_exception=True)
        return Response(
            self.render(services.environment_update(environment=environment, values=dict(body.validated_data)))
        )
