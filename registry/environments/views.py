"""Environment endpoints: create, retrieve, update, list, archive, delete."""

from __future__ import annotations

from typing import Any

from registry.core.openapi import resource_schema
from registry.core.views import DeleteMixin, WorkspaceViewSet, WriteMixin
from registry.environments import services
from registry.environments.models import Environment
from registry.environments.serializers import (
    EnvironmentSerializer,
    EnvironmentWriteSerializer,
)


@resource_schema("environment", read=EnvironmentSerializer, write=EnvironmentWriteSerializer)
class EnvironmentViewSet(WriteMixin, DeleteMixin, WorkspaceViewSet):
    model = Environment
    resource_type = "environment"
    serializer_class = EnvironmentSerializer

    write_serializer = EnvironmentWriteSerializer

    def create_instance(self, values: dict[str, Any]) -> Environment:
        return services.environment_create(workspace=self.principal.workspace, values=values)

    def update_instance(self, instance: Environment, values: dict[str, Any]) -> Environment:
        return services.environment_update(environment=instance, values=values)
