"""The HTTP/1.1 client of the webhook sender: keep-alive connections to a given address (the one egress checked),
with TLS verified against the endpoint's name, one POST at a time per connection, the status and the body's first
bytes read with the httptools (llhttp) parser.

Hand-written on asyncio protocols, as the gateway's upstream client is, because it measured about fifty times
cheaper per request than httpx on this machine (bench/README.md, "Webhook delivery"); a sender's CPU is what
bounds its deliveries per second. Redirects are never followed: a 3xx is just a status here.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from functools import lru_cache
from typing import cast

import httptools

# A pooled connection unused this long is closed (receivers close idle ones anyway, often sooner).
IDLE_CONNECTION_SECONDS = 30.0


class ConnectionClosed(ConnectionError):
    """The connection ended before a response; `answered_nothing` when not a byte came back (a reused
    connection the receiver had closed while idle: the request may be sent again on a new one)."""

    def __init__(self, message: str, *, answered_nothing: bool) -> None:
        super().__init__(message)
        self.answered_nothing = answered_nothing


class ProtocolBroken(ConnectionError):
    """The receiver's answer was not HTTP/1.1."""


class Response:
    """A response's status and the body's first `limit` bytes; `complete` once all of it was read."""

    def __init__(self, status: int, body: bytes, *, complete: bool) -> None:
        self.status, self.body, self.complete = status, body, complete


class WebhookConnection(asyncio.Protocol):
    """One connection: `exchange` writes a request and waits for the response's status and first bytes."""

    def __init__(self, body_limit: int) -> None:
        self.body_limit = body_limit
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.waiter: asyncio.Future[Response] | None = None
        self.status: int | None = None
        self.body = bytearray()
        self.received = False
        self.keep_alive = True
        self.until_close = False
        self.idle_since = time.monotonic()
        self.used = False

    # -- asyncio -------------------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.received = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(ProtocolBroken("the receiver switched protocols"))
        except httptools.HttpParserError as error:
            self._fail(ProtocolBroken(f"not an HTTP/1.1 answer: {error}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.keep_alive = False
        if self.status is not None:  # the status came: it decides, whatever the body did
            self._resolve(complete=self.until_close)
        else:
            unanswered = "the receiver closed it before answering"
            reason = f"connection closed: {exc}" if exc else f"connection closed: {unanswered}"
            self._fail(ConnectionClosed(reason, answered_nothing=not self.received))

    # -- httptools ----------------------------------------------------------------------------------------
    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if 100 <= status < 200:  # informational (100 Continue): the answer is still to come
            return
        self.status = status
        self.keep_alive = self.parser.should_keep_alive()
        self.until_close = not self.keep_alive

    def on_body(self, body: bytes) -> None:
        if self.status is None or len(self.body) >= self.body_limit:
            return
        self.body += body
        if len(self.body) >= self.body_limit:
            self.keep_alive = False  # not read to its end: this connection cannot carry another request
            self._resolve(complete=False)

    def on_message_complete(self) -> None:
        if self.status is not None:
            self._resolve(complete=True)

    # -- use ----------------------------------------------------------------------------------------------
    @property
    def reusable(self) -> bool:
        return self.keep_alive and self.transport is not None and not self.transport.is_closing()

    async def exchange(self, request: bytes) -> Response:
        assert self.transport is not None
        self.waiter = asyncio.get_running_loop().create_future()
        self.status, self.body, self.received = None, bytearray(), False
        self.transport.write(request)
        try:
            return await self.waiter
        finally:
            self.waiter = None
            self.used = True
            self.idle_since = time.monotonic()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def _resolve(self, *, complete: bool) -> None:
        if self.waiter is not None and not self.waiter.done() and self.status is not None:
            self.waiter.set_result(Response(self.status, bytes(self.body[: self.body_limit]), complete=complete))

    def _fail(self, error: Exception) -> None:
        self.keep_alive = False
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(error)
        self.close()


class ConnectionPool:
    """The idle connections to one destination of one endpoint (the sender keeps its requests within the
    endpoint's concurrency, which bounds them)."""

    def __init__(self) -> None:
        self.idle: list[WebhookConnection] = []
        self.in_use = 0
        self.last_used = time.monotonic()

    def take(self) -> WebhookConnection | None:
        while self.idle:
            connection = self.idle.pop()
            if connection.reusable and time.monotonic() - connection.idle_since < IDLE_CONNECTION_SECONDS:
                return connection
            connection.close()
        return None

    def give_back(self, connection: WebhookConnection) -> None:
        if connection.reusable:
            self.idle.append(connection)
        else:
            connection.close()

    def close_idle(self, older_than: float) -> None:
        """Close idle connections unused for `older_than` seconds."""
        now = time.monotonic()
        keep = []
        for connection in self.idle:
            if now - connection.idle_since < older_than and connection.reusable:
                keep.append(connection)
            else:
                connection.close()
        self.idle = keep

    def close(self) -> None:
        for connection in self.idle:
            connection.close()
        self.idle = []


@lru_cache(maxsize=1)
def tls_context() -> ssl.SSLContext:
    """The system's trust store, certificate and name checks on (made once: loading the store is slow)."""
    return ssl.create_default_context()


async def open_connection(address: str, port: int, *, tls_name: str | None, body_limit: int) -> WebhookConnection:
    """A connection to `address` (never a name: it was checked), TLS verified for `tls_name` (also sent as SNI)."""
    loop = asyncio.get_running_loop()
    _, connection = await loop.create_connection(
        lambda: WebhookConnection(body_limit),
        host=address,
        port=port,
        ssl=tls_context() if tls_name is not None else None,
        server_hostname=tls_name,
    )
    return connection
