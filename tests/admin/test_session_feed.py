"""The admin page's live feed of a session (`registry.sessions.admin_stream`) as the ASGI router serves it,
with the staff member's session cookie: a `wake` when the log grows and the `agent.message` previews, over
the channel layer (this machine's Redis); refused to anyone who may not view the session."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.auth import AuthMiddlewareStack
from channels.db import database_sync_to_async
from channels.routing import URLRouter
from channels.testing import ApplicationCommunicator
from django.test import Client
from django.urls import re_path

from registry.sessions import log, notify
from registry.sessions.admin_stream import FEED_ROUTE, AdminSessionFeed
from tests.support.admin_pages import SESSIONS, on
from tests.support.admin_staff import staff_client
from tests.support.admin_turns import Turn
from tests.support.tenants import Tenant

# Channels' database calls close the connection around them: the data must be committed.
pytestmark = pytest.mark.django_db(transaction=True)

APPLICATION = URLRouter([re_path(FEED_ROUTE, AuthMiddlewareStack(AdminSessionFeed.as_asgi()))])
SECONDS = 10


def feed(client: Client, session_id: str) -> ApplicationCommunicator:
    """A GET of the session's feed with the client's cookies, as daphne hands it to the router."""
    cookies = "; ".join(f"{name}={morsel.value}" for name, morsel in client.cookies.items())
    path = on(SESSIONS, session_id, "feed")
    scope = {
        "type": "http",
        "method": "GET",
        "path": path,
        "query_string": b"",
        "headers": [(b"cookie", cookies.encode())],
    }
    return ApplicationCommunicator(APPLICATION, scope)


async def opened(communicator: ApplicationCommunicator) -> dict[str, Any]:
    await communicator.send_input({"type": "http.request", "body": b"", "more_body": False})
    return await communicator.receive_output(SECONDS)


async def body(communicator: ApplicationCommunicator) -> bytes:
    message = await communicator.receive_output(SECONDS)
    assert message["type"] == "http.response.body" and message["more_body"] is True
    return bytes(message["body"])


async def closed(communicator: ApplicationCommunicator) -> None:
    await communicator.send_input({"type": "http.disconnect"})
    await communicator.wait(SECONDS)


def test_the_feed_wakes_the_page_and_carries_message_previews(console, turn: Turn):
    @async_to_sync
    async def follow() -> list[bytes]:
        communicator = feed(console, turn.session_id)
        start = await opened(communicator)
        assert start["status"] == 200 and (b"content-type", b"text/event-stream") in start["headers"]
        received = [await body(communicator), await body(communicator)]  # opened, then subscribed: read once
        notify.publish_delta(turn.session_id, "agent.thinking", {"type": "event_start", "event": {"id": "sevt_t"}})
        frame = {"type": "event_delta", "event_id": "sevt_m", "delta": {"type": "content_delta", "index": 0}}
        notify.publish_delta(turn.session_id, "agent.message", frame)
        received.append(await body(communicator))
        await database_sync_to_async(log.emit)(session_id=turn.session_id, type="agent.thinking", body={})
        received.append(await body(communicator))
        await closed(communicator)
        return received

    received = follow()
    assert received[0] == b": feed open\n\n" and received[1] == received[3] == b'event: wake\ndata: {"type":"wake"}\n\n'
    assert received[2].startswith(b"event: event_delta\ndata: ") and b'"event_id":"sevt_m"' in received[2]


def test_the_feed_is_refused_to_whoever_may_not_view_the_session(client, turn: Turn, other_tenant: Tenant):
    @async_to_sync
    async def status(client: Client) -> int:
        communicator = feed(client, turn.session_id)
        start = await opened(communicator)
        await communicator.wait(SECONDS)
        return int(start["status"])

    assert status(client) == 403  # not logged in
    assert status(staff_client("outsider", {other_tenant.workspace: "operator"})) == 403  # staff of another workspace
