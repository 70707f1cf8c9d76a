"""Environment endpoints: create, retrieve, update, list, archive, delete."""

from __future__ import annotations

from registry.core.views import DeleteMixin, WorkspaceViewSet, WriteMixin, WriteServices
from registry.environments import services
from registry.environments.models import Environment
from registry.environments.serializers import EnvironmentSerializer, EnvironmentWriteSerializer


class EnvironmentViewSet(WriteMixin, DeleteMixin, WorkspaceViewSet):
    model = Environment
    serializer_class = EnvironmentSerializer
    write_serializer = EnvironmentWriteSerializer
    write_services = WriteServices(services.environment_create, services.environment_update, "environment")
