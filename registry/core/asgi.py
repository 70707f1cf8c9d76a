"""Serving Django's sync stack (DRF views) under ASGI in one worker-thread hop per request.

Django's own ASGI handler runs a sync view through several `sync_to_async` hand-offs (signals, the
view, a per-request executor); on this project's 2-core machine that cost 7-9 ms per request. Here
the WSGI handler runs whole in a pool thread: the body is spooled first (refused with 413 past
REGISTRY_MAX_UPLOAD_BYTES, chunked bodies included), a response with a known small length comes back
in one piece, and anything else (file downloads) is streamed chunk by chunk.

`skip_twisted_form_parsing` stops daphne's Twisted request from parsing request bodies nobody reads.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from tempfile import SpooledTemporaryFile
from typing import Any

import orjson
from asgiref.sync import AsyncToSync, sync_to_async
from asgiref.wsgi import WsgiToAsgiInstance
from daphne import http_protocol
from django.conf import settings
from django.core.wsgi import get_wsgi_application

from registry.core.errors import ErrorType, error_body
from registry.core.ids import new_id

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

SPOOL_IN_MEMORY_BYTES = 64 * 1024
BUFFERED_RESPONSE_BYTES = 1024 * 1024


class WsgiRequest(WsgiToAsgiInstance):  # type: ignore[misc]
    """One request: spool the body, run the WSGI app in a pool thread, send the answer."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.scope = scope
        limit = int(settings.REGISTRY_MAX_UPLOAD_BYTES)
        with SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY_BYTES) as body:
            received = 0
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return
                chunk = message.get("body", b"")
                received += len(chunk)
                if received > limit:
                    await self.too_large(send, limit)
                    return
                body.write(chunk)
                if not message.get("more_body"):
                    break
            body.seek(0)
            self.body_length = received
            self.sync_send = AsyncToSync(send)
            buffered = await sync_to_async(self.run, thread_sensitive=False)(body)
        if buffered is not None:
            start, content = buffered
            await send(start)
            await send({"type": "http.response.body", "body": content})

    def build_environ(self, scope: Scope, body: Any) -> dict[str, Any]:
        """The WSGI environ; the spooled body's real length stands in for a missing (chunked) one."""
        environ: dict[str, Any] = super().build_environ(scope, body)
        environ["CONTENT_LENGTH"] = str(self.body_length)
        return environ

    def run(self, body: Any) -> tuple[dict[str, Any], bytes] | None:
        """Run the app; a small response of known length is returned whole, any other is streamed here."""
        iterable: Iterable[bytes] = self.wsgi_application(self.build_environ(self.scope, body), self.start_response)
        try:
            length = self.response_content_length
            if length is not None and length <= BUFFERED_RESPONSE_BYTES:
                return self.response_start, b"".join(iterable)[:length]
            self.stream(iterable)
            return None
        finally:
            close = getattr(iterable, "close", None)
            if close is not None:
                close()  # Django's request_finished: connections go back to the pool

    def stream(self, iterable: Iterable[bytes]) -> None:
        self.sync_send(self.response_start)
        for chunk in iterable:
            self.sync_send({"type": "http.response.body", "body": chunk, "more_body": True})
        self.sync_send({"type": "http.response.body"})

    async def too_large(self, send: Send, limit: int) -> None:
        request_id = new_id("req")
        content = orjson.dumps(
            error_body(ErrorType.REQUEST_TOO_LARGE, f"Request body exceeds the limit of {limit} bytes.", request_id)
        )
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"request-id", request_id.encode()),
                    (b"content-length", str(len(content)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": content})


class WsgiApplication:
    """The ASGI application: a `WsgiRequest` per HTTP request."""

    def __init__(self) -> None:
        self.wsgi_application = get_wsgi_application()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await WsgiRequest(self.wsgi_application)(scope, receive, send)


class _BodyUnparsedWebRequest(http_protocol.WebRequest):  # type: ignore[misc]
    """Daphne's request with Twisted's POST form parsing off (Twisted's own constructor switch)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **{**kwargs, "parsePOSTFormSubmission": False})


def skip_twisted_form_parsing() -> None:
    """Make daphne build `_BodyUnparsedWebRequest`s.

    Daphne passes the raw body to the application, yet Twisted's request parsed every POST's
    Content-Type with the `email` package (6 % of the process's CPU under appends) and read a
    multipart or urlencoded body whole into memory a second time to fill `args`, which nothing uses
    (an upload parsed twice). Daphne does not expose Twisted's switch, so its factory's request class
    is replaced once at start.
    """
    http_protocol.WebRequest = _BodyUnparsedWebRequest
