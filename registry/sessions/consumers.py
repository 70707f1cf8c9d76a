"""`GET /v1/sessions/{id}/events/stream` and `GET /v1/sessions/{id}/threads/{thread_id}/stream`: the
Server-Sent Events streams of a session and of one of its threads, as Channels consumers.

Both are one consumer following a log (`stream_logs`): the session's (its primary thread's) or a child
thread's. The database is the truth: the stream replays from the cursor, then reads the database again on
every wake-up from the channel layer (the session's, for all its threads) and on a timer, so a lost wake-up
(or Redis gone) only delays an event. It ends when the client goes away or after the log's terminal event.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any
from urllib.parse import parse_qs

import orjson
from channels.db import database_sync_to_async
from channels.exceptions import StopConsumer
from channels.generic.http import AsyncHttpConsumer
from django.conf import settings
from django.http import HttpRequest
from rest_framework import exceptions as drf_exceptions
from rest_framework.views import APIView

from registry.core.callers import Caller, scoped_access
from registry.core.errors import ApiError, ErrorType, error_body
from registry.core.ids import new_id
from registry.sessions import notify, selectors
from registry.sessions.events import DELTA_TYPES
from registry.sessions.models import Session, SessionThread
from registry.sessions.stream_logs import log_of
from registry.sessions.tail import sse_frame, tail_for

logger = logging.getLogger(__name__)


def parse_cursor(raw: str | None, name: str) -> int | None:
    if raw is None or raw == "":
        return None
    if not raw.isdigit():
        raise ValueError(f"{name}: must be a non-negative integer sequence number.")
    return int(raw)


class EventStreamConsumer(AsyncHttpConsumer):
    """One SSE connection following one log: the subclass finds what it follows (`followed`). The channel layer
    is reached through the session's tail, so a layer failure never ends the stream."""

    channel_layer_alias = None  # the tail subscribes once per session and survives layer outages

    def followed(self, principal: Caller, route: dict[str, Any]) -> Session | SessionThread:
        """The session or child thread the route names, if the caller may read it (else `StreamRefused`)."""
        raise NotImplementedError

    async def http_request(self, message: dict[str, Any]) -> None:
        if message.get("more_body"):
            return
        self.request_id = new_id("req")
        try:
            await self.open()
        except StreamRefused as refusal:
            await self.refuse(refusal)
            raise StopConsumer() from None
        except Exception:
            logger.exception("stream could not open")
            await self.refuse(StreamRefused(500, ErrorType.API, "Internal server error."))
            raise StopConsumer() from None

    async def http_disconnect(self, message: dict[str, Any]) -> None:
        for task in getattr(self, "tasks", []):
            task.cancel()
        if hasattr(self, "tail"):
            self.tail.unsubscribe(self)
        raise StopConsumer()

    # -- opening ---------------------------------------------------------------------------
    async def open(self) -> None:
        headers = {name.decode("latin1").lower(): value.decode("latin1") for name, value in self.scope["headers"]}
        query = parse_qs(self.scope.get("query_string", b"").decode())
        principal = await authenticate(headers)
        route = self.scope["url_route"]["kwargs"]
        self.log = log_of(await database_sync_to_async(self.followed)(principal, route))
        self.session_id = route["id"]
        self.native = bool(headers.get("native-beta", "").strip())
        self.deltas = set(query.get("event_deltas", []) + query.get("event_deltas[]", []))
        unknown = self.deltas - set(DELTA_TYPES)
        if unknown:
            raise StreamRefused(400, ErrorType.INVALID_REQUEST, f"event_deltas: unknown type(s) {sorted(unknown)}.")
        try:
            cursor = parse_cursor(headers.get("last-event-id"), "Last-Event-ID")
            if cursor is None:
                cursor = parse_cursor((query.get("from_cursor") or [None])[0], "from_cursor")
        except ValueError as error:
            raise StreamRefused(400, ErrorType.INVALID_REQUEST, str(error)) from None
        self.last_seq = (cursor - 1) if cursor is not None else self.log.start_seq
        self.tail = tail_for(self.session_id)
        notify.register_consumer_loop()
        if cursor is None:
            await self.log.seed()
        self.last_write = time.monotonic()
        self.wake = asyncio.Event()
        self.send_lock = asyncio.Lock()
        await self.send_headers(
            status=200,
            headers=[
                (b"content-type", b"text/event-stream"),
                (b"cache-control", b"no-cache"),
                (b"x-accel-buffering", b"no"),
                (b"request-id", self.request_id.encode()),
            ],
        )
        await self.send_body(b": stream open\n\n", more_body=True)
        self.tail.subscribe(self)
        self.tasks = [asyncio.create_task(self.pump())]

    async def refuse(self, refusal: StreamRefused) -> None:
        body = orjson.dumps(error_body(refusal.error_type, refusal.message, self.request_id))
        headers = [(b"content-type", b"application/json"), (b"request-id", self.request_id.encode())]
        if refusal.status == 401:
            headers.append((b"www-authenticate", b'Bearer realm="api"'))
        await self.send_response(refusal.status, body, headers=headers)

    # -- the loop: read the database after the last sent seq, on wake-ups and on a timer -----
    async def pump(self) -> None:
        poll = settings.REGISTRY_STREAM_POLL_SECONDS
        keepalive = settings.REGISTRY_STREAM_KEEPALIVE_SECONDS
        try:
            max_age = 0.0
            while True:
                self.wake.clear()
                if await self.catch_up(max_age=max_age):
                    await self.finish()
                    return
                try:
                    await asyncio.wait_for(self.wake.wait(), timeout=poll)
                    max_age = 0.0  # woken: read the database after the wake-up
                except TimeoutError:
                    max_age = poll / 2  # timer: another stream's recent read will do
                if time.monotonic() - self.last_write >= keepalive:
                    await self.write(b": ping\n\n")
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("stream %s failed", getattr(self, "session_id", "?"))
            await self.finish()

    async def catch_up(self, *, max_age: float) -> bool:
        """Send every event after the last sent seq; True once the terminal event went out (or the log ended)."""
        visible = selectors.visible_types(native=self.native)
        log = self.log
        while True:
            batch = await log.events_after(self.last_seq, max_age=max_age)
            if not batch:
                return log.ended()
            for event in batch:
                if event.type in visible:
                    await self.write(log.frame(event, native=self.native))
                self.last_seq = event.seq or self.last_seq
                if event.type == log.terminal_type:
                    return True
            max_age = float("inf")  # the rest of this catch-up may come from what is cached

    async def write(self, data: bytes) -> None:
        async with self.send_lock:
            await self.send_body(data, more_body=True)
            self.last_write = time.monotonic()

    async def finish(self) -> None:
        async with self.send_lock:
            await self.send_body(b"", more_body=False)

    # -- deltas, fanned out by the tail ---------------------------------------------------------
    async def on_delta(self, event_type: str, frame: dict[str, Any], thread_id: str | None) -> None:
        if event_type in self.deltas and self.log.previews(thread_id):
            await self.write(sse_frame(frame))


class SessionStreamConsumer(EventStreamConsumer):
    """`GET /v1/sessions/{id}/events/stream`."""

    def followed(self, principal: Caller, route: dict[str, Any]) -> Session | SessionThread:
        return find_session(principal, route["id"])


class ThreadStreamConsumer(EventStreamConsumer):
    """`GET /v1/sessions/{id}/threads/{thread_id}/stream`: the primary thread's is the session's stream."""

    def followed(self, principal: Caller, route: dict[str, Any]) -> Session | SessionThread:
        return find_thread(principal, route["id"], route["thread_id"])


class StreamRefused(Exception):
    """The stream cannot open: answered with an error body instead."""

    def __init__(self, status: int, error_type: ErrorType, message: str) -> None:
        super().__init__(message)
        self.status, self.error_type, self.message = status, error_type, message


@database_sync_to_async
def _authenticate(meta: dict[str, str]) -> Caller | None:
    """The caller, by the API's own authentication (settings: DEFAULT_AUTHENTICATION_CLASSES)."""
    request = HttpRequest()
    request.META = meta
    for authenticator in APIView().get_authenticators():
        result = authenticator.authenticate(request)  # type: ignore[arg-type]
        if result is not None:
            caller = result[0]
            assert isinstance(caller, Caller)
            return caller
    return None


async def authenticate(headers: dict[str, str]) -> Caller:
    meta = {"HTTP_" + name.upper().replace("-", "_"): value for name, value in headers.items()}
    try:
        principal = await _authenticate(meta)
    except drf_exceptions.AuthenticationFailed as error:
        raise StreamRefused(401, ErrorType.AUTHENTICATION, str(error.detail)) from None
    if principal is None:
        raise StreamRefused(401, ErrorType.AUTHENTICATION, "Authentication credentials were not provided.")
    return principal


def find_session(principal: Caller, session_id: str) -> Session:
    session = (
        Session.objects.filter(workspace_id=principal.workspace_id, pk=session_id)
        .only("id", "last_seq", "environment_id")
        .first()
    )
    # An environment key streams its environment's sessions, a work secret its own session (issue 26); a
    # scoped caller learns nothing of other sessions: unknown and foreign are both 403.
    if principal.is_scoped and (
        session is None or not scoped_access(principal, environment_id=session.environment_id, session_id=session.id)
    ):
        raise StreamRefused(403, ErrorType.PERMISSION, "This credential is not allowed to act on this session.")
    if session is None:
        raise StreamRefused(404, ErrorType.NOT_FOUND, f"Session {session_id} not found.")
    return session


def find_thread(principal: Caller, session_id: str, thread_id: str) -> Session | SessionThread:
    """The thread of a session the caller may read: the session itself for its primary thread."""
    session = find_session(principal, session_id)
    try:
        return selectors.thread_in_session(session, thread_id)
    except ApiError as error:
        raise StreamRefused(error.status_code, error.error_type, error.message) from None
