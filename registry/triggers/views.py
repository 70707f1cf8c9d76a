"""Trigger endpoints: create, retrieve, update, list, delete, and the actions pause, unpause, start,
stop, restart and archive (what each does to `status` and `next_fire_at`: see the package docstring)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from registry.core.openapi import resource_schema
from registry.core.views import DeleteMixin, WorkspaceViewSet, WriteMixin
from registry.triggers import services
from registry.triggers.models import Trigger
from registry.triggers.serializers import TriggerSerializer, TriggerWriteSerializer

ACTIONS = ("pause", "unpause", "start", "stop", "restart")
ACTION_SCHEMA = extend_schema(request=None, responses=TriggerSerializer)


@resource_schema("trigger", read=TriggerSerializer, write=TriggerWriteSerializer)
class TriggerViewSet(WriteMixin, DeleteMixin, WorkspaceViewSet):
    model = Trigger
    resource_type = "trigger"
    serializer_class = TriggerSerializer

    def get_queryset(self) -> QuerySet[Trigger]:
        return super().get_queryset().select_related("agent", "workspace")

    write_serializer = TriggerWriteSerializer

    def create_instance(self, values: dict[str, Any]) -> Trigger:
        return services.trigger_create(workspace=self.principal.workspace, values=values)

    def update_instance(self, instance: Trigger, values: dict[str, Any]) -> Trigger:
        return services.trigger_update(trigger=instance, values=values)

    def act(self, service: Callable[..., Trigger]) -> Response:
        return Response(self.render(service(trigger=self.get_object())))

    @ACTION_SCHEMA
    def archive(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return self.act(services.trigger_archive)

    @ACTION_SCHEMA
    def pause(self, request: Request, id: str) -> Response:
        return self.act(services.trigger_pause)

    @ACTION_SCHEMA
    def unpause(self, request: Request, id: str) -> Response:
        return self.act(services.trigger_unpause)

    @ACTION_SCHEMA
    def start(self, request: Request, id: str) -> Response:
        return self.act(services.trigger_start)

    @ACTION_SCHEMA
    def stop(self, request: Request, id: str) -> Response:
        return self.act(services.trigger_stop)

    @ACTION_SCHEMA
    def restart(self, request: Request, id: str) -> Response:
        return self.act(services.trigger_restart)
