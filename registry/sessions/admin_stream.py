"""The admin page's live feed of one session, as Server-Sent Events: the `agent.message` previews (the frames
the API's stream sends for `event_deltas`) and a `wake` whenever the session's log grew.

Previews are never stored, so the page can only see them through the channel layer, by way of the session's
shared tail (`registry.sessions.tail`); complete events it still reads from the transcript view. The caller is
the admin's user (Django's session cookie, through Channels' `AuthMiddlewareStack`) and must be allowed to view
the session on its admin page.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from channels.db import database_sync_to_async
from channels.exceptions import StopConsumer
from channels.generic.http import AsyncHttpConsumer
from django.conf import settings
from django.contrib import admin
from django.contrib.admin.utils import quote, unquote
from django.http import HttpRequest
from django.urls import reverse

from registry.sessions import notify
from registry.sessions.models import Session
from registry.sessions.tail import sse_frame, tail_for

PREVIEWED = "agent.message"
# Served by the ASGI router (settings/asgi.py), beside the admin's own URL of the session.
FEED_ROUTE = r"^admin/agent_sessions/session/(?P<object_id>[^/]+)/feed/$"
WAKE = sse_frame({"type": "wake"})


def feed_url(session: Session) -> str:
    change = reverse("admin:agent_sessions_session_change", args=[quote(session.pk)])
    return change.removesuffix("change/") + "feed/"


def followable(user: Any, object_id: str) -> str | None:
    """The session's id when `user` may view it on its admin page (the admin's own checks), else None."""
    if not (getattr(user, "is_active", False) and getattr(user, "is_staff", False)):
        return None
    model_admin = admin.site.get_model_admin(Session)
    request = HttpRequest()
    request.user = user
    session = model_admin.get_object(request, object_id)
    if session is None or not model_admin.has_view_permission(request, session):
        return None
    return str(session.pk)


class AdminSessionFeed(AsyncHttpConsumer):
    """One page's feed; it lasts until the page goes away."""

    channel_layer_alias = None  # the session's tail holds the one channel-layer subscription

    async def http_request(self, message: dict[str, Any]) -> None:
        if message.get("more_body"):
            return
        object_id = unquote(self.scope["url_route"]["kwargs"]["object_id"])
        session_id = await database_sync_to_async(followable)(self.scope.get("user"), object_id)
        if session_id is None:
            await self.send_response(403, b"Forbidden.\n", headers=[(b"content-type", b"text/plain")])
            raise StopConsumer()
        await self.open(session_id)

    async def open(self, session_id: str) -> None:
        self.wake = asyncio.Event()
        self.send_lock = asyncio.Lock()
        headers = [
            (b"content-type", b"text/event-stream"),
            (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no"),
        ]
        await self.send_headers(status=200, headers=headers)
        await self.send_body(b": feed open\n\n", more_body=True)
        notify.register_consumer_loop()
        self.tail = tail_for(session_id)
        self.tail.subscribe(self)
        self.pump = asyncio.create_task(self.forward_wakes())

    async def forward_wakes(self) -> None:
        """A `wake` per wake-up of the session's streams; a comment now and then keeps proxies from closing."""
        keepalive = settings.REGISTRY_STREAM_KEEPALIVE_SECONDS
        while True:
            try:
                await asyncio.wait_for(self.wake.wait(), timeout=keepalive)
            except TimeoutError:
                await self.write(b": ping\n\n")
                continue
            self.wake.clear()
            await self.write(WAKE)

    async def on_delta(self, event_type: str, frame: dict[str, Any], thread_id: str | None) -> None:
        if event_type == PREVIEWED and thread_id is None:  # the page previews the primary thread's messages
            await self.write(sse_frame(frame))

    async def write(self, data: bytes) -> None:
        async with self.send_lock:
            await self.send_body(data, more_body=True)

    async def http_disconnect(self, message: dict[str, Any]) -> None:
        if hasattr(self, "pump"):
            self.pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.pump
        if hasattr(self, "tail"):
            self.tail.unsubscribe(self)
        raise StopConsumer()
