"""Session endpoints: CRUD, archive (terminates), the outcome, and the event list and append.

The event stream is a Channels consumer (`consumers.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db.models import QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, PolymorphicProxySerializer, extend_schema, inline_serializer
from rest_framework import exceptions, serializers
from rest_framework.request import Request
from rest_framework.response import Response

from registry.core.callers import ENVIRONMENT_KEY, WORK_SECRET, scoped_access
from registry.core.errors import not_found
from registry.core.fields import TaggedUnionField, validated
from registry.core.openapi import LIST_PARAMETERS, list_schema
from registry.core.pagination import KeysetPagination, decode_cursor_token, encode_cursor_token, parse_limit
from registry.core.views import DeleteMixin, WorkspaceViewSet, WriteMixin, WriteServices, object_action
from registry.sessions import resources, selectors, services
from registry.sessions.events import SendEventsSerializer, validated_events
from registry.sessions.filters import EventFilter, SessionFilter
from registry.sessions.models import Session, SessionEvent
from registry.sessions.serializers import (
    RESOURCE_KINDS,
    AppendedEventSerializer,
    EventSerializer,
    SessionCreateSerializer,
    SessionResourceUpdateSerializer,
    SessionSerializer,
    SessionUpdateSerializer,
)

NATIVE_HEADER = "HTTP_NATIVE_BETA"
TYPES_PARAMETER = OpenApiParameter("types", OpenApiTypes.STR, many=True)


def is_native(request: Request) -> bool:
    """The `native-beta` header is on when present with any non-empty value."""
    return bool(request.META.get(NATIVE_HEADER, "").strip())


# What a self-hosted environment's worker does with a session (issue 26): an environment key acts on the
# sessions of its environment, a work secret on its own session only. Everything else refuses them.
SCOPED_KINDS = (ENVIRONMENT_KEY, WORK_SECRET)
EVENTS_MAX_LIMIT = 1000
SCOPED_EVENT_TYPES = frozenset({"user.tool_result", "user.custom_tool_result"})


class ScopedSessionMixin:
    """Session views open to scoped credentials: the session must be the scoped caller's."""

    accepts_scoped_credentials = SCOPED_KINDS

    def get_object(self) -> Session:
        caller = self.principal  # type: ignore[attr-defined]
        if not caller.is_scoped:
            return super().get_object()  # type: ignore[misc, no-any-return]
        # A scoped caller learns nothing of sessions beyond its scope: unknown and foreign are both 403.
        session = Session.objects.filter(workspace_id=caller.workspace_id, pk=self.kwargs["id"]).first()  # type: ignore[attr-defined]
        if session is None or not scoped_access(caller, environment_id=session.environment_id, session_id=session.id):
            raise exceptions.PermissionDenied("This credential is not allowed to act on this session.")
        return session


class SessionViewSet(ScopedSessionMixin, WriteMixin, DeleteMixin, WorkspaceViewSet):
    scoped_actions = frozenset({"retrieve"})
    model = Session
    serializer_class = SessionSerializer
    filterset_class = SessionFilter
    pagination = KeysetPagination(with_prev_page=True)
    write_serializer = SessionCreateSerializer
    update_serializer = SessionUpdateSerializer
    write_services = WriteServices(services.session_create, services.session_update, "session")

    archive = object_action(services.session_archive, "session")

    def perform_delete(self, instance: Session) -> None:
        services.session_delete(session=instance)

    @extend_schema(
        responses=inline_serializer(
            "OutcomeEvaluation",
            {
                "type": serializers.ChoiceField(choices=["outcome_evaluation"]),
                "outcome_id": serializers.CharField(),
                "description": serializers.CharField(),
                "verdict": serializers.CharField(allow_null=True),
                "explanation": serializers.CharField(allow_null=True),
                "iteration": serializers.IntegerField(),
                "max_iterations": serializers.IntegerField(),
                "evaluated_at": serializers.DateTimeField(allow_null=True),
            },
        )
    )
    def outcome(self, request: Request, id: str) -> Response:
        outcome = selectors.latest_outcome(self.get_object())
        if outcome is None:
            raise not_found(f"Session {id} has no outcome defined.")
        return Response(outcome)


class SessionEventViewSet(ScopedSessionMixin, WorkspaceViewSet):
    """`GET` and `POST /v1/sessions/{id}/events`. A scoped credential may list and send tool results."""

    model = Session
    resource_type = "session"
    operation_name = "session_event"
    archivable = False
    # The reference client's session tool runner reads a session's history with limit=1000.
    pagination = KeysetPagination(keys=("seq",), default_order="asc", with_prev_page=True, max_limit=EVENTS_MAX_LIMIT)

    @list_schema("SessionEventList", EventSerializer, *LIST_PARAMETERS[:3], TYPES_PARAMETER, with_prev_page=True)
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        session = self.get_object()
        native = is_native(request)
        return self.events_page(request, selectors.events_visible(session=session, native=native), native=native)

    def events_page(
        self,
        request: Request,
        rows: QuerySet[Any],
        *,
        native: bool,
        as_event: Callable[[Any], SessionEvent] | None = None,
    ) -> Response:
        """A page of the log `rows` (filtered by the query, paginated on `seq`) in the caller's dialect; `as_event`
        reads a row as an event, where the rows are not `SessionEvent`s."""
        events = EventFilter(request.query_params, queryset=rows)
        if not events.is_valid():
            raise serializers.ValidationError(events.errors)
        page, links = self.pagination.paginate(events.qs, request)
        if as_event is not None:
            page = [as_event(row) for row in page]
        return KeysetPagination.response([EventSerializer.render(event, native=native) for event in page], links)

    @extend_schema(
        request=SendEventsSerializer,
        responses=inline_serializer("SentEvents", {"data": AppendedEventSerializer(many=True)}),
    )
    def create(self, request: Request, id: str) -> Response:
        if self.principal.is_scoped:
            self.get_object()
        events = validated_events(request.data)
        if self.principal.is_scoped and any(event.get("type") not in SCOPED_EVENT_TYPES for event in events):
            raise exceptions.PermissionDenied(
                "This credential may send only user.tool_result and user.custom_tool_result events."
            )
        created = services.events_append(
            session_id=id,
            workspace_id=self.principal.workspace_id,
            events=events,
            native=is_native(request),
        )
        return Response({"data": [AppendedEventSerializer.render(event) for event in created]})


RESOURCE_LIST_MAX = 1000


class SessionResourceViewSet(WorkspaceViewSet):
    """`/v1/sessions/{id}/resources`: list, add; `/{resource_id}`: retrieve, update (token), delete."""

    model = Session
    resource_type = "session"
    operation_name = "session_resource"
    archivable = False

    @extend_schema(
        parameters=LIST_PARAMETERS[:2],
        responses=inline_serializer(
            "SessionResourceList",
            {"data": serializers.ListField(), "next_page": serializers.CharField(allow_null=True)},
        ),
    )
    def list(self, request: Request, id: str) -> Response:
        records = [selectors.public_resource(record) for record in self.get_object().resources]
        if request.query_params.get("page"):
            after = decode_cursor_token(request.query_params["page"])
            ids = [record["id"] for record in records]
            records = records[ids.index(after) + 1 :] if after in ids else []
        # `limit`: 1 to 1000; omitted, every resource.
        limit = parse_limit(request.query_params.get("limit"), default=RESOURCE_LIST_MAX, maximum=RESOURCE_LIST_MAX)
        page, rest = records[:limit], records[limit:]
        return Response({"data": page, "next_page": encode_cursor_token(page[-1]["id"]) if rest else None})

    @extend_schema(
        request=PolymorphicProxySerializer(
            component_name="SessionResourceParams",
            serializers=[*RESOURCE_KINDS.values()],
            resource_type_field_name="type",
        ),
        responses=OpenApiTypes.OBJECT,
    )
    def create(self, request: Request, id: str) -> Response:
        body = TaggedUnionField(RESOURCE_KINDS, component_name="SessionResource")
        resource = body.run_validation(request.data)
        record = resources.resource_add(session=self.get_object(), resource=resource)
        return Response(selectors.public_resource(record))

    @extend_schema(responses=OpenApiTypes.OBJECT)
    def retrieve(self, request: Request, id: str, resource_id: str) -> Response:
        return Response(selectors.public_resource(resources.find(self.get_object(), resource_id)))

    @extend_schema(request=SessionResourceUpdateSerializer, responses=OpenApiTypes.OBJECT)
    def partial_update(self, request: Request, id: str, resource_id: str) -> Response:
        values = validated(SessionResourceUpdateSerializer, request.data)
        record = resources.resource_update(
            session=self.get_object(), resource_id=resource_id, authorization_token=values["authorization_token"]
        )
        return Response(selectors.public_resource(record))

    @extend_schema(
        responses=inline_serializer(
            "SessionResourceDeleted", {"id": serializers.CharField(), "type": serializers.CharField()}
        )
    )
    def destroy(self, request: Request, id: str, resource_id: str) -> Response:
        resources.resource_delete(session=self.get_object(), resource_id=resource_id)
        return Response({"id": resource_id, "type": "session_resource_deleted"})
