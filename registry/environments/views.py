"""Environment endpoints: create, retrieve, update, list, archive, delete."""

from __future__ import annotations

from registry.core.views import DeleteMixin, WorkspaceViewSet, WriteMixin, WriteServices, object_action
from registry.environments import services
from registry.environments.models import Environment
from registry.environments.serializers import EnvironmentSerializer, EnvironmentWriteSerializer


class EnvironmentViewSet(WriteMixin, DeleteMixin, WorkspaceViewSet):
    model = Environment
    serializer_class = EnvironmentSerializer
    write_serializer = EnvironmentWriteSerializer
    write_services = WriteServices(services.environment_create, services.environment_update, "environment")

    archive = object_action(services.environment_archive, "environment")

    def perform_delete(self, instance: Environment) -> None:
        services.environment_delete(environment=instance)
