"""The upstream client: pooled keep-alive HTTP/1.1 connections with read-side backpressure.

Built on asyncio protocols and the httptools (llhttp) parser because it measured faster than the general
clients and than h11 for this side (bench/gateway/RESULTS.md); the client-facing server uses it for plain requests too.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import cast
from urllib.parse import urlsplit

import httptools

CONNECT_TIMEOUT_SECONDS = 10.0
MAX_IDLE_PER_ORIGIN = 256
# Reading pauses when this much body is buffered and unconsumed (a slow client downstream).
READ_HIGH_WATER = 256 * 1024


class UpstreamError(Exception):
    """The upstream could not be reached or broke the connection before answering."""


@dataclass(frozen=True)
class Origin:
    """Where a connection goes, and the path prefix of the base URL."""

    scheme: str
    host: str
    port: int
    base_path: str

    @classmethod
    def parse(cls, url: str) -> Origin:
        """The origin of an absolute http(s) URL."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return cls(parts.scheme, parts.hostname, port, parts.path.rstrip("/"))

    @property
    def host_header(self) -> bytes:
        """The Host header value."""
        default = 443 if self.scheme == "https" else 80
        return (self.host if self.port == default else f"{self.host}:{self.port}").encode()

    @property
    def key(self) -> tuple[str, str, int]:
        """The pool key."""
        return (self.scheme, self.host, self.port)


def serialize_request(method: bytes, target: bytes, headers: list[tuple[bytes, bytes]], body: bytes) -> bytes:
    """An HTTP/1.1 request; header lines that could split the request are refused."""
    lines = [method + b" " + target + b" HTTP/1.1"]
    for name, value in headers:
        if b"\r" in value or b"\n" in value or b"\r" in name or b"\n" in name or b":" in name:
            raise UpstreamError(f"refusing an unsafe upstream header {name!r}")
        lines.append(name + b": " + value)
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


@dataclass(frozen=True)
class ResponseHead:
    """Status and headers (names lower-case) of an upstream response."""

    status_code: int
    headers: list[tuple[bytes, bytes]]


class _UpstreamProtocol(asyncio.Protocol):
    """One upstream connection; hands the response head to a waiter and body chunks to a reader.

    Responses are parsed by httptools (llhttp); benchmarked against h11 it parses a response about a
    hundred times faster, which is most of the gateway's per-request cost (bench/gateway/RESULTS.md).
    """

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.reused = False
        self.received_any = False
        self.busy = False
        self.keep_alive = True
        self.finished = False
        self.error: Exception | None = None
        self._head: asyncio.Future[ResponseHead] | None = None
        self._headers: list[tuple[bytes, bytes]] = []
        self._until_close = False
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._wakeup: asyncio.Future[None] | None = None
        self._paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    @property
    def usable(self) -> bool:
        """Idle, open and kept alive by the upstream."""
        return (
            self.transport is not None
            and not self.transport.is_closing()
            and self.error is None
            and not self.busy
            and self.keep_alive
        )

    def start(self, data: bytes) -> asyncio.Future[ResponseHead]:
        """Send a serialized request; the returned future resolves with the response head."""
        assert self.transport is not None
        self._head = asyncio.get_running_loop().create_future()
        self.busy = True
        self.finished = False
        self.received_any = False
        self._headers = []
        self.transport.write(data)
        return self._head

    def data_received(self, data: bytes) -> None:
        self.received_any = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as error:
            self._fail(UpstreamError(f"upstream broke HTTP: {error}"))

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        self.keep_alive = self.parser.should_keep_alive()
        names = {name for name, _ in self._headers}
        self._until_close = b"content-length" not in names and b"transfer-encoding" not in names
        if self._head is not None and not self._head.done():
            self._head.set_result(ResponseHead(self.parser.get_status_code(), self._headers))

    def on_body(self, body: bytes) -> None:
        self._chunks.append(body)
        self._buffered += len(body)
        if self._buffered > READ_HIGH_WATER and self.transport is not None and not self._paused:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        self.finished = True
        self._wake()

    def _wake(self) -> None:
        if self._wakeup is not None and not self._wakeup.done():
            self._wakeup.set_result(None)

    def _fail(self, error: Exception) -> None:
        if self.error is None:
            self.error = error
        if self._head is not None and not self._head.done():
            self._head.set_exception(error)
        self._wake()
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._until_close and self._head is not None and self._head.done():
            # A response framed by the end of the connection is complete now.
            self.finished = True
        if not self.finished:
            self._fail(UpstreamError(f"upstream connection lost: {exc or 'closed'}"))
        elif self.error is None:
            self.error = UpstreamError("closed")
        self.keep_alive = False
        self._wake()

    async def next_chunk(self) -> bytes | None:
        """Everything received since the last call (at least one chunk), or None at the end of the body.

        Joining what has already arrived keeps one write per network read downstream, however the
        upstream framed its chunks.
        """
        while not self._chunks:
            if self.finished:
                return None
            if self.error is not None:
                raise self.error
            self._wakeup = asyncio.get_running_loop().create_future()
            await self._wakeup
            self._wakeup = None
        data = self._chunks.popleft() if len(self._chunks) == 1 else b"".join(self._chunks)
        self._chunks.clear()
        self._buffered = 0
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return data

    def close(self) -> None:
        """Drop the connection (a response abandoned mid-body cannot be reused)."""
        self.keep_alive = False
        if self.transport is not None:
            self.transport.close()


class UpstreamResponse:
    """A response whose body is read whole (`read`) or chunk by chunk (`chunks`)."""

    def __init__(self, pool: UpstreamPool, origin: Origin, connection: _UpstreamProtocol, head: ResponseHead) -> None:
        self.status = head.status_code
        self.headers = head.headers
        self._pool = pool
        self._origin = origin
        self._connection: _UpstreamProtocol | None = connection

    def header(self, name: bytes) -> bytes | None:
        """A response header value by lower-case name."""
        return next((value for key, value in self.headers if key == name), None)

    async def read(self) -> bytes:
        """The whole body; the connection returns to the pool."""
        parts = [chunk async for chunk in self.chunks()]
        return b"".join(parts)

    async def chunks(self) -> AsyncIterator[bytes]:
        """Body chunks as they arrive; the connection returns to the pool at the end."""
        connection = self._connection
        assert connection is not None
        try:
            while (chunk := await connection.next_chunk()) is not None:
                yield chunk
        finally:
            self.release()

    def release(self) -> None:
        """Give the connection back when its response was read to the end, else drop it."""
        connection, self._connection = self._connection, None
        if connection is None:
            return
        if connection.finished and connection.error is None and connection.keep_alive:
            self._pool.give_back(self._origin, connection)
        else:
            connection.close()


class UpstreamPool:
    """Keep-alive connections per origin, reused last-in first-out."""

    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        self._idle: dict[tuple[str, str, int], list[_UpstreamProtocol]] = {}
        self._ssl_context = ssl_context
        self._closed = False

    def _tls(self) -> ssl.SSLContext:
        if self._ssl_context is None:
            self._ssl_context = ssl.create_default_context()
        return self._ssl_context

    async def _connect(self, origin: Origin) -> _UpstreamProtocol:
        loop = asyncio.get_running_loop()
        tls = self._tls() if origin.scheme == "https" else None
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_SECONDS):
                _, protocol = await loop.create_connection(
                    _UpstreamProtocol, origin.host, origin.port, ssl=tls, server_hostname=origin.host if tls else None
                )
        except (OSError, ssl.SSLError) as error:
            raise UpstreamError(f"cannot connect to {origin.host}:{origin.port}: {error}") from error
        return protocol

    def _take_idle(self, origin: Origin) -> _UpstreamProtocol | None:
        idle = self._idle.get(origin.key)
        while idle:
            connection = idle.pop()
            if connection.usable:
                connection.reused = True
                return connection
        return None

    def give_back(self, origin: Origin, connection: _UpstreamProtocol) -> None:
        """Return a connection whose exchange completed."""
        connection.busy = False
        if self._closed:
            connection.close()
            return
        idle = self._idle.setdefault(origin.key, [])
        if len(idle) >= MAX_IDLE_PER_ORIGIN:
            connection.close()
            return
        idle.append(connection)

    async def request(
        self, origin: Origin, method: bytes, path: bytes, headers: list[tuple[bytes, bytes]], body: bytes
    ) -> UpstreamResponse:
        """Send a request and wait for the response head. A reused connection that the upstream had closed
        before answering is retried once on a fresh one."""
        all_headers = [(b"host", origin.host_header), (b"content-length", str(len(body)).encode()), *headers]
        connection = self._take_idle(origin) or await self._connect(origin)
        try:
            head = await self._exchange(connection, method, path, all_headers, body)
        except UpstreamError:
            if not (connection.reused and not connection.received_any):
                raise
            connection = await self._connect(origin)
            head = await self._exchange(connection, method, path, all_headers, body)
        return UpstreamResponse(self, origin, connection, head)

    @staticmethod
    async def _exchange(
        connection: _UpstreamProtocol, method: bytes, path: bytes, headers: list[tuple[bytes, bytes]], body: bytes
    ) -> ResponseHead:
        data = serialize_request(method, path, headers, body)
        try:
            return await connection.start(data)
        except asyncio.CancelledError:
            connection.close()
            raise

    def close(self) -> None:
        """Close every idle connection; later give-backs are closed too."""
        self._closed = True
        for idle in self._idle.values():
            for connection in idle:
                connection.close()
        self._idle.clear()


def fetcher(pool: UpstreamPool) -> Callable[[str, dict[str, str], float], Awaitable[tuple[int, bytes]]]:
    """A small GET helper over the pool for control-plane lookups (JWKS, vaults)."""

    async def fetch(url: str, headers: dict[str, str], timeout: float) -> tuple[int, bytes]:
        origin = Origin.parse(url)
        parts = urlsplit(url)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        encoded = [(name.encode(), value.encode()) for name, value in headers.items()]
        try:
            async with asyncio.timeout(timeout):
                response = await pool.request(origin, b"GET", target.encode(), encoded, b"")
                return response.status, await response.read()
        except TimeoutError as error:
            raise UpstreamError(f"no answer from {url} in {timeout}s") from error

    return fetch
