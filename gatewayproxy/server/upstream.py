"""The upstream client: pooled keep-alive HTTP/1.1 connections with read-side backpressure, a cap on the
connections per origin (a request waits a bounded time for one, then 503 `overloaded`), a read timeout between
body chunks, and an idle timeout on pooled connections.

Built on asyncio protocols and the httptools (llhttp) parser because it measured faster than the general
clients and than h11 for this side (bench/gateway/RESULTS.md); the client-facing server uses it for plain requests too.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import NamedTuple, cast
from urllib.parse import urlsplit

import httptools

from gatewayproxy.errors import ErrorCode, GatewayError
from gatewayproxy.server.timers import LazyTimer
from gatewayproxy.server.tls_reads import SharedTlsReads

CONNECT_TIMEOUT_SECONDS = 10.0
MAX_IDLE_PER_ORIGIN = 256
# A pooled connection unused this long is closed (upstreams drop idle ones anyway, often sooner).
IDLE_CONNECTION_SECONDS = 60.0
# Reading pauses when this much body is buffered and unconsumed (a slow client downstream).
READ_HIGH_WATER = 256 * 1024


class UpstreamError(Exception):
    """The upstream could not be reached or broke the connection before answering."""


class UpstreamIdle(UpstreamError, TimeoutError):
    """The upstream sent nothing for the read timeout (a stalled stream is 504, not a broken one; before the
    answer is in, it is an attempt that timed out)."""


@dataclass(frozen=True, slots=True)
class UpstreamLimits:
    """Per-request limits: connections open to the origin at most, seconds to wait for one of them, and
    seconds the response body may go without a byte (None: no read timeout)."""

    max_connections: int = 256
    wait_seconds: float = 1.0
    read_timeout: float | None = None


DEFAULT_LIMITS = UpstreamLimits()


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
    """An HTTP/1.1 request; header lines that could split the request are refused (checked on the joined
    block: any CR or LF beyond the separators, or a colon in a name)."""
    block = b"".join([name + b": " + value + b"\r\n" for name, value in headers])
    if (
        block.count(b"\r") != len(headers)
        or block.count(b"\n") != len(headers)
        or b":" in b" ".join([name for name, _ in headers])
    ):
        unsafe = next(name for name, value in headers if _unsafe_header(name, value))
        raise UpstreamError(f"refusing an unsafe upstream header {unsafe!r}")
    return b"%s %s HTTP/1.1\r\n%s\r\n%s" % (method, target, block, body)


def _unsafe_header(name: bytes, value: bytes) -> bool:
    return b"\r" in value or b"\n" in value or b"\r" in name or b"\n" in name or b":" in name


class ResponseHead(NamedTuple):
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
        self.read_timeout: float | None = None
        loop = asyncio.get_running_loop()
        self.idle_timer = LazyTimer(loop, self.close)
        self._read_timer = LazyTimer(loop, self._read_expired)
        self.on_lost: Callable[[], None] | None = None

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
        self._emptied()  # what a reader released unread of the last response, all of it arrived, is not this one's
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
        self.idle_timer.drop()
        self._read_timer.drop()
        on_lost, self.on_lost = self.on_lost, None
        if on_lost is not None:
            on_lost()

    def _read_expired(self) -> None:
        self._fail(UpstreamIdle(f"the upstream sent nothing for {self.read_timeout}s"))

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
            if self.read_timeout:
                self._read_timer.set(self.read_timeout)
            try:
                await self._wakeup
            finally:
                self._read_timer.clear()
            self._wakeup = None
        data = self._chunks.popleft() if len(self._chunks) == 1 else b"".join(self._chunks)
        self._emptied()
        return data

    def _emptied(self) -> None:
        """Hold no body chunk, and read again if a full buffer had paused reading."""
        self._chunks.clear()
        self._buffered = 0
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()

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


class _OriginSlots:
    """One origin's connections: how many are open (connecting, busy or idle), the idle ones, and the requests
    waiting for one."""

    __slots__ = ("idle", "open", "waiters")

    def __init__(self) -> None:
        self.idle: list[_UpstreamProtocol] = []
        self.open = 0
        self.waiters: deque[asyncio.Future[_UpstreamProtocol | None]] = deque()

    def hand_over(self, connection: _UpstreamProtocol | None) -> bool:
        """Give `connection` (None: the right to open one) to the first request still waiting."""
        while self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.done():
                waiter.set_result(connection)
                return True
        return False

    def lost(self) -> None:
        """One of the origin's connections closed: a waiting request may open another."""
        self.open -= 1
        if self.waiters and self.hand_over(None):
            self.open += 1


class _TlsUpstreamProtocol(_UpstreamProtocol, SharedTlsReads):
    """`_UpstreamProtocol` over TLS (see `gatewayproxy.server.tls_reads`)."""


class UpstreamPool:
    """Keep-alive connections per origin, reused last-in first-out, at most `max_connections` open per origin."""

    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        self._origins: dict[tuple[str, str, int], _OriginSlots] = {}
        self._limits: dict[tuple[str, str, int], UpstreamLimits] = {}
        self._ssl_context = ssl_context
        self._closed = False

    def configure(self, limits: dict[tuple[str, str, int], UpstreamLimits]) -> None:
        """The limits of each origin from now on (by `Origin.key`); others get `DEFAULT_LIMITS`."""
        self._limits = limits

    def _tls(self) -> ssl.SSLContext:
        if self._ssl_context is None:
            self._ssl_context = ssl.create_default_context()
        return self._ssl_context

    def open_connections(self, origin: Origin) -> int:
        """Connections open to `origin` now (connecting, busy or idle)."""
        slots = self._origins.get(origin.key)
        return slots.open if slots is not None else 0

    async def _connect(self, origin: Origin, slots: _OriginSlots) -> _UpstreamProtocol:
        """A new connection, counted in `slots` (which the caller has already reserved)."""
        loop = asyncio.get_running_loop()
        tls = self._tls() if origin.scheme == "https" else None
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_SECONDS):
                _, protocol = await loop.create_connection(
                    _TlsUpstreamProtocol if tls else _UpstreamProtocol,
                    origin.host,
                    origin.port,
                    ssl=tls,
                    server_hostname=origin.host if tls else None,
                )
        except (OSError, ssl.SSLError) as error:
            slots.lost()
            raise UpstreamError(f"cannot connect to {origin.host}:{origin.port}: {error}") from error
        except BaseException:
            slots.lost()
            raise
        protocol.on_lost = slots.lost
        return protocol

    async def _acquire(self, origin: Origin, slots: _OriginSlots, limits: UpstreamLimits) -> _UpstreamProtocol:
        """A connection to `origin` within the cap, waiting up to `limits.wait_seconds` for one to free up."""
        if slots.open < limits.max_connections:
            slots.open += 1
            return await self._connect(origin, slots)
        waiter: asyncio.Future[_UpstreamProtocol | None] = asyncio.get_running_loop().create_future()
        slots.waiters.append(waiter)
        try:
            async with asyncio.timeout(limits.wait_seconds):
                handed = await waiter
        except BaseException as error:
            if not waiter.done() or waiter.cancelled():
                if isinstance(error, TimeoutError):
                    raise GatewayError(
                        ErrorCode.OVERLOADED,
                        f"no connection to {origin.host}:{origin.port} freed up within {limits.wait_seconds}s",
                        headers=((b"retry-after", b"1"),),
                    ) from None
                raise
            # Handed a connection just as the wait ended: pass it on rather than leak it.
            self._release_unused(origin, slots, waiter.result())
            raise
        if handed is None:
            return await self._connect(origin, slots)
        if handed.transport is None or handed.transport.is_closing():
            # It closed between its hand-over and now; its place in the count is free again.
            slots.open += 1
            return await self._connect(origin, slots)
        handed.reused = True
        return handed

    def _release_unused(self, origin: Origin, slots: _OriginSlots, connection: _UpstreamProtocol | None) -> None:
        if connection is not None:
            self.give_back(origin, connection)
        elif not slots.hand_over(None):
            slots.open -= 1

    def _take_idle(self, slots: _OriginSlots) -> _UpstreamProtocol | None:
        idle = slots.idle
        while idle:
            connection = idle.pop()
            connection.idle_timer.clear()
            if connection.usable:
                connection.reused = True
                return connection
        return None

    def give_back(self, origin: Origin, connection: _UpstreamProtocol) -> None:
        """Return a connection whose exchange completed."""
        connection.busy = False
        connection.read_timeout = None
        if self._closed:
            connection.close()
            return
        slots = self._origins.get(origin.key)
        if slots is None:
            connection.close()
            return
        if slots.waiters and slots.hand_over(connection):
            connection.busy = True
            return
        idle = slots.idle
        if len(idle) >= MAX_IDLE_PER_ORIGIN:
            connection.close()
            return
        connection.idle_timer.set(IDLE_CONNECTION_SECONDS)
        idle.append(connection)

    async def request(
        self,
        origin: Origin,
        method: bytes,
        path: bytes,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        limits: UpstreamLimits | None = None,
    ) -> UpstreamResponse:
        """Send a request and wait for the response head. A reused connection that the upstream had closed
        before answering is retried once on a fresh one. `limits` default to the origin's configured ones."""
        if limits is None:
            limits = self._limits.get(origin.key, DEFAULT_LIMITS)
        all_headers = [(b"host", origin.host_header), (b"content-length", str(len(body)).encode()), *headers]
        slots = self._origins.get(origin.key)
        if slots is None:
            slots = self._origins[origin.key] = _OriginSlots()
        connection = self._take_idle(slots) or await self._acquire(origin, slots, limits)
        connection.read_timeout = limits.read_timeout
        try:
            head = await self._exchange(connection, method, path, all_headers, body)
        except UpstreamError:
            if not (connection.reused and not connection.received_any):
                raise
            connection = await self._acquire(origin, slots, limits)
            connection.read_timeout = limits.read_timeout
            head = await self._exchange(connection, method, path, all_headers, body)
        return UpstreamResponse(self, origin, connection, head)

    @staticmethod
    async def _exchange(
        connection: _UpstreamProtocol, method: bytes, path: bytes, headers: list[tuple[bytes, bytes]], body: bytes
    ) -> ResponseHead:
        data = serialize_request(method, path, headers, body)
        try:
            return await connection.start(data)
        except BaseException:
            # Abandoned before its answer (cancelled, timed out, refused): the connection cannot be reused.
            connection.close()
            raise

    def close(self) -> None:
        """Close every idle connection; later give-backs are closed too."""
        self._closed = True
        for slots in self._origins.values():
            for connection in slots.idle:
                connection.close()
            slots.idle.clear()


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
