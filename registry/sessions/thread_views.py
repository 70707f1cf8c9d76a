"""Session thread endpoints: the list (the primary thread first), retrieve, archive, and each thread's events.

A thread's event stream is a Channels consumer (`consumers.py`). Scoped credentials read the threads of the
sessions they may read, as they read the sessions themselves; archiving takes a workspace credential.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from registry.core.errors import invalid_request
from registry.core.openapi import LIST_PARAMETERS, list_schema
from registry.core.pagination import after_condition, decode_cursor, encode_cursor, parse_limit
from registry.core.views import WorkspaceViewSet
from registry.sessions import selectors, thread_log
from registry.sessions.filters import ThreadFilter
from registry.sessions.models import Session, SessionThread
from registry.sessions.serializers import EventSerializer
from registry.sessions.thread_serializers import SessionThreadSerializer
from registry.sessions.views import TYPES_PARAMETER, ScopedSessionMixin, SessionEventViewSet, is_native

STATUSES_PARAMETER = OpenApiParameter("statuses", OpenApiTypes.STR, many=True, enum=SessionThread.Status.values)
# Child threads are listed by (created_at, id); a page cursor after the primary thread holds a time before any.
KEYS = ("created_at", "id")
BEFORE_EVERY_CHILD = [datetime(1970, 1, 1, tzinfo=UTC), ""]


def _cursor_after(thread: Session | SessionThread) -> str:
    values = BEFORE_EVERY_CHILD if isinstance(thread, Session) else [thread.created_at, thread.pk]
    return encode_cursor("next", values)


def thread_page(session: Session, request: Request) -> tuple[list[Session | SessionThread], str | None]:
    """A page of the session's threads with the `statuses` asked for: the primary thread (the session) first,
    then the child threads by (created_at, id); and the cursor of the next page, if there is one."""
    params = request.query_params
    limit = parse_limit(params.get("limit"))
    found = ThreadFilter(params, queryset=selectors.child_threads(session))
    if not found.is_valid():
        raise serializers.ValidationError(found.errors)
    statuses = found.form.cleaned_data.get("statuses") or []
    children = found.qs
    page: list[Session | SessionThread] = []
    if params.get("page"):
        _, after = decode_cursor(params["page"], KEYS, SessionThread)
        children = children.filter(after_condition(KEYS, after, descending=False))
    elif not statuses or session.status in statuses:
        page.append(session)
    page += children.order_by(*KEYS)[: limit + 1 - len(page)]
    return page[:limit], (_cursor_after(page[limit - 1]) if len(page) > limit else None)


class SessionThreadViewSet(ScopedSessionMixin, WorkspaceViewSet):
    """`/v1/sessions/{id}/threads`: list; `/{thread_id}`: retrieve; `/{thread_id}/archive`."""

    model = Session
    resource_type = "session"
    operation_name = "session_thread"
    serializer_class = SessionThreadSerializer
    archivable = False
    scoped_actions = frozenset({"list", "retrieve"})

    def thread(self) -> Session | SessionThread:
        return selectors.thread_in_session(self.get_object(), self.kwargs["thread_id"])

    @list_schema("SessionThreadList", SessionThreadSerializer, *LIST_PARAMETERS[:2], STATUSES_PARAMETER)
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        page, next_page = thread_page(self.get_object(), request)
        return Response({"data": self.render_many(page), "next_page": next_page})

    @extend_schema(responses=SessionThreadSerializer)
    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return Response(self.render(self.thread()))

    @extend_schema(request=None, responses=SessionThreadSerializer)
    def archive(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        thread = self.thread()
        if isinstance(thread, Session):
            raise invalid_request(
                f"thread_id: {self.kwargs['thread_id']} is the primary thread of session {thread.pk}, which cannot be "
                f"archived on its own: archive the session instead (POST /v1/sessions/{thread.pk}/archive)."
            )
        return Response(self.render(thread_log.archive(thread)))


class SessionThreadEventViewSet(SessionEventViewSet):
    """`GET /v1/sessions/{id}/threads/{thread_id}/events`: the primary thread's are the session's events, a child
    thread's come from its own log; listed, filtered and paginated alike."""

    operation_name = "session_thread_event"

    @list_schema("SessionThreadEventList", EventSerializer, *LIST_PARAMETERS[:3], TYPES_PARAMETER, with_prev_page=True)
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        session = self.get_object()
        thread = selectors.thread_in_session(session, self.kwargs["thread_id"])
        native = is_native(request)
        if isinstance(thread, Session):
            return self.events_page(request, selectors.events_visible(session=session, native=native), native=native)
        rows = selectors.thread_events_visible(thread=thread, native=native)
        return self.events_page(
            request, rows, native=native, as_event=lambda row: thread_log.as_log_event(row, session.pk)
        )
