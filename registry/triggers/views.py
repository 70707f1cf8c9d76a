"""Trigger endpoints: create, retrieve, update, list, delete, and the actions pause, unpause, start,
stop, restart and archive (what each does to `status` and `next_fire_at`: see the package docstring)."""

from __future__ import annotations

from django.db.models import QuerySet

from registry.core.views import DeleteMixin, WorkspaceViewSet, WriteMixin, WriteServices, object_action
from registry.triggers import services
from registry.triggers.models import Trigger
from registry.triggers.serializers import TriggerSerializer, TriggerWriteSerializer

ACTIONS = ("pause", "unpause", "start", "stop", "restart")


class TriggerViewSet(WriteMixin, DeleteMixin, WorkspaceViewSet):
    model = Trigger
    serializer_class = TriggerSerializer
    write_serializer = TriggerWriteSerializer
    write_services = WriteServices(services.trigger_create, services.trigger_update, "trigger")

    def get_queryset(self) -> QuerySet[Trigger]:
        return super().get_queryset().select_related("agent", "workspace")

    archive = object_action(services.trigger_archive, "trigger")
    pause = object_action(services.trigger_pause, "trigger")
    unpause = object_action(services.trigger_unpause, "trigger")
    start = object_action(services.trigger_start, "trigger")
    stop = object_action(services.trigger_stop, "trigger")
    restart = object_action(services.trigger_restart, "trigger")
