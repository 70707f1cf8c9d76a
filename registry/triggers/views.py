"""Trigger endpoints: create, retrieve, update, list, delete, and the actions pause, unpause, start,
stop, restart and archive (what each does to `status` and `next_fire_at`: see the package docstring)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_view, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from registry.core.openapi import LIST_PARAMETERS, list_response
from registry.core.views import DeleteMixin, WorkspaceViewSet
from registry.triggers import services
from registry.triggers.models import Trigger
from registry.triggers.selectors import render_trigger
from registry.triggers.serializers import TriggerSerializer, TriggerWriteSerializer

ACTIONS = ("pause", "unpause", "start", "stop", "restart")
ACTION_SCHEMA = extend_schema(request=None, responses=TriggerSerializer)


@extend_schema_view(
    create=extend_schema(request=TriggerWriteSerializer, responses=TriggerSerializer),
    partial_update=extend_schema(request=TriggerWriteSerializer, responses=TriggerSerializer),
    retrieve=extend_schema(responses=TriggerSerializer),
    list=extend_schema(parameters=LIST_PARAMETERS, responses=list_response("TriggerList", TriggerSerializer)),
    destroy=extend_schema(
        responses=inline_serializer(
            "TriggerDeleted",
            {"id": serializers.CharField(), "type": serializers.ChoiceField(choices=["trigger_deleted"])},
        )
    ),
)
class TriggerViewSet(DeleteMixin, WorkspaceViewSet):
    model = Trigger
    resource_type = "trigger"
    render_object = staticmethod(render_trigger)
    serializer_class = TriggerSerializer

    def get_queryset(self) -> QuerySet[Trigger]:
        return super().get_queryset().select_related("agent", "workspace")

    def create(self, request: Request) -> Response:
        body = TriggerWriteSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        trigger = services.trigger_create(workspace=self.principal.workspace, values=dict(body.validated_data))
        return Response(self.render(trigger))

    def partial_update(self, request: Request, id: str) -> Response:
        trigger = self.get_object()
        body = TriggerWriteSerializer(data=request.data, partial=True)
        body.is_valid(raise_exception=True)
        return Response(self.render(services.trigger_update(trigger=trigger, values=dict(body.validated_data))))

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
