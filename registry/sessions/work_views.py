"""Work queue endpoints of a self-hosted environment: `/v1/environments/{environment_id}/work[...]`.

A workspace credential may call every one; an environment key the worker's calls on its own environment
(poll, ack, heartbeat, stop, list, stats); a work item's secret only heartbeat and stop of its own item.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from registry.core.callers import ENVIRONMENT_KEY, SCOPED_KINDS, WORK_SECRET, scoped_access
from registry.core.errors import error_body, invalid_request, not_found, request_id_of
from registry.core.fields import MetadataField, StrictSerializer, validated
from registry.core.pagination import KeysetPagination
from registry.core.serialization import ConstantField, MetadataMapField, ResponseSerializer
from registry.core.views import WorkspaceViewSet
from registry.environments.models import Environment
from registry.sessions import work
from registry.sessions.models import WorkItem

STATES = [state.value for state in WorkItem.State]
# Which scoped credentials each action admits (a workspace key or OIDC token is admitted everywhere).
SCOPED_ACTIONS: dict[str, tuple[str, ...]] = {
    "poll": (ENVIRONMENT_KEY,),
    "ack": (ENVIRONMENT_KEY,),
    "list": (ENVIRONMENT_KEY,),
    "stats": (ENVIRONMENT_KEY,),
    "heartbeat": (ENVIRONMENT_KEY, WORK_SECRET),
    "stop": (ENVIRONMENT_KEY, WORK_SECRET),
}


class SessionWorkDataSerializer(ResponseSerializer):
    id = serializers.CharField(source="session_ref")
    type = ConstantField("session")


class WorkSerializer(ResponseSerializer):
    """A work item (`BetaSelfHostedWork`); `secret` only on the poll that hands it out."""

    id = serializers.CharField()
    acknowledged_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()
    data = SessionWorkDataSerializer()  # type: ignore[assignment]
    environment_id = serializers.CharField()
    latest_heartbeat_at = serializers.DateTimeField(allow_null=True)
    metadata = MetadataMapField()
    secret = serializers.CharField(allow_null=True)
    started_at = serializers.DateTimeField(allow_null=True)
    state = serializers.ChoiceField(choices=STATES)
    stop_requested_at = serializers.DateTimeField(allow_null=True)
    stopped_at = serializers.DateTimeField(allow_null=True)
    type = ConstantField("work")

    @staticmethod
    def get_data(item: WorkItem) -> dict[str, Any]:
        return SessionWorkDataSerializer.render(item)

    @staticmethod
    def get_secret(item: WorkItem) -> str | None:
        return getattr(item, "secret", None)


class HeartbeatSerializer(ResponseSerializer):
    last_heartbeat = serializers.CharField()
    lease_extended = serializers.BooleanField()
    state = serializers.ChoiceField(choices=STATES)
    ttl_seconds = serializers.IntegerField()
    type = ConstantField("work_heartbeat")


class QueueStatsSerializer(ResponseSerializer):
    depth = serializers.IntegerField()
    oldest_queued_at = serializers.DateTimeField(allow_null=True)
    pending = serializers.IntegerField()
    type = ConstantField("work_queue_stats")
    workers_polling = serializers.IntegerField(allow_null=True)


class WorkUpdateSerializer(StrictSerializer):
    metadata = MetadataField(allow_null_values=True)


def _query_int(request: Request, name: str, low: int, high: int) -> int | None:
    raw = request.query_params.get(name)
    if raw in (None, ""):
        return None
    if not raw.lstrip("-").isdigit() or not low <= int(raw) <= high:
        raise invalid_request(f"{name}: must be an integer from {low} to {high}.")
    return int(raw)


class WorkViewSet(WorkspaceViewSet):
    model = WorkItem
    serializer_class = WorkSerializer
    archivable = False
    pagination = KeysetPagination(("created_at", "id"))

    @property
    def accepts_scoped_credentials(self) -> tuple[str, ...]:
        return SCOPED_ACTIONS.get(getattr(self, "action", "") or "", ())

    def environment(self) -> Environment:
        environment_id = self.kwargs["environment_id"]
        environment = Environment.objects.filter(workspace_id=self.principal.workspace_id, pk=environment_id).first()
        # A work secret reaches only its own item (`id`); an environment key its own environment.
        allowed = scoped_access(self.principal, environment_id=environment_id, work_id=self.kwargs.get("id"))
        if environment is None or not allowed:
            raise not_found(f"Environment {environment_id} not found.")
        return environment

    def get_queryset(self) -> Any:
        if getattr(self, "swagger_fake_view", False):
            return WorkItem.objects.none()
        return WorkItem.objects.filter(workspace_id=self.principal.workspace_id, environment_id=self.environment().pk)

    @extend_schema(responses={200: WorkSerializer})
    def poll(self, request: Request, *args: Any, **kwargs: Any) -> HttpResponse:
        block_ms = _query_int(request, "block_ms", 1, work.BLOCK_MAX_MS) or 0
        reclaim = _query_int(request, "reclaim_older_than_ms", 0, 24 * 3600 * 1000)
        worker_id = request.headers.get("anthropic-worker-id") or None
        item = work.work_poll(
            environment=self.environment(), block_ms=block_ms, reclaim_older_than_ms=reclaim, worker_id=worker_id
        )
        if item is None:  # DRF renders None as an empty body; the reference client's poller reads JSON null
            return HttpResponse(b"null", content_type="application/json")
        item.secret = work.work_secret(item)  # type: ignore[attr-defined]
        return Response(self.render(item))

    @extend_schema(responses={200: QueueStatsSerializer})
    def stats(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return Response(work.work_stats(environment=self.environment()))

    @extend_schema(request=None)
    def ack(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return Response(self.render(work.work_ack(item=self.get_object())))

    @extend_schema(
        request=None,
        responses={200: HeartbeatSerializer, 412: OpenApiResponse(description="heartbeat_precondition_failed")},
    )
    def heartbeat(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        item = self.get_object()
        ttl = _query_int(request, "desired_ttl_seconds", 1, work.TTL_MAX_SECONDS)
        expected = request.query_params.get("expected_last_heartbeat")
        try:
            beat = work.work_heartbeat(item=item, expected_last_heartbeat=expected, desired_ttl_seconds=ttl)
        except work.HeartbeatPreconditionFailed as refused:
            body = error_body(refused.error_type, refused.message, request_id_of(request))
            body["error"].update(error_code=refused.error_code, details=refused.details())
            return Response(body, status=412)
        return Response(beat.response())

    def stop(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        raw = request.data.get("force") if isinstance(request.data, dict) else None
        if raw is not None and not isinstance(raw, bool):
            raise invalid_request("force: must be a boolean.")
        by_worker = self.principal.credential_kind in SCOPED_KINDS  # the worker itself: it is done
        stopped = work.work_stop(item=self.get_object(), force=bool(raw), by_worker=by_worker)
        return Response(self.render(stopped))

    @extend_schema(request=WorkUpdateSerializer)
    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        item = self.get_object()
        values = validated(WorkUpdateSerializer, request.data)
        return Response(self.render(work.work_update(item=item, metadata=values["metadata"])))
