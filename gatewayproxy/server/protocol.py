"""One asyncio.Protocol per client connection: reads requests through the sans-IO layer, runs the handler,
writes its response (streamed with backpressure), enforces the read and idle timeouts and the listener's
concurrency cap, and cancels the handler when the client goes away."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import cast

from gatewayproxy.errors import ErrorCode, Protocol
from gatewayproxy.http.connection import (
    HttpLimits,
    ProtocolFailure,
    Request,
    RequestReceived,
    ServerConnection,
    failure_response,
)
from gatewayproxy.server.flow import FlowControl
from gatewayproxy.server.timers import LazyTimer
from gatewayproxy.server.tls_reads import SharedTlsReads

logger = logging.getLogger("gatewayproxy.server")


@dataclass
class Response:
    """What a handler answers: a whole `body`, or a `stream` of body chunks. `first_chunk_ready` says the
    stream's first chunk comes without waiting, so the head goes out with it in one write (a stream whose
    first chunk may wait, such as an MCP event stream, sends its head at once)."""

    status: int
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    body: bytes = b""
    stream: AsyncIterator[bytes] | None = None
    first_chunk_ready: bool = False


Handler = Callable[[Request], Awaitable[Response]]
# The protocol a path speaks, for errors answered before the request reaches its handler.
ProtocolOf = Callable[[str], Protocol]
# Bytes of a request line an overloaded listener reads to learn the path of the request it refuses.
_SHED_LINE_BYTES = 8192
_OVERLOADED = ProtocolFailure(503, ErrorCode.OVERLOADED, "the gateway is at its concurrency limit; retry later")
_RETRY_AFTER = "retry-after: 1\r\n"
# After an early error answer the rest of the request is read and dropped for this long before closing: closing
# with unread bytes would reset the connection and could destroy the answer before the client reads it.
LINGER_SECONDS = 2.0


def _vendor_a(path: str) -> Protocol:
    return Protocol.VENDOR_A


@dataclass(frozen=True)
class Timeouts:
    """Seconds a client may take to send a request, and to start the next one on a kept-alive connection."""

    request_read: float = 10.0
    idle: float = 75.0


class Capacity:
    """How many requests a listener serves at once (a response streams until its end); beyond `limit` the
    next one is refused with 503 `overloaded` before its body is read."""

    __slots__ = ("active", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.active = 0

    @property
    def full(self) -> bool:
        """True when one more request would exceed the limit."""
        return self.active >= self.limit


def new_request_id() -> str:
    """An unguessable request id."""
    return "req_" + os.urandom(12).hex()


class ConnectionTracker:
    """The live connections of a listener, so shutdown can drain them."""

    def __init__(self) -> None:
        self.connections: set[HttpProtocol] = set()
        self.draining = False

    def drain(self) -> None:
        """Stop keeping connections alive; idle ones close now, busy ones after their response."""
        self.draining = True
        for connection in list(self.connections):
            connection.close_if_idle()

    @property
    def busy(self) -> int:
        """How many connections are serving a request."""
        return sum(1 for connection in self.connections if connection.busy)


class HttpProtocol(asyncio.Protocol):
    """Serves requests one at a time on one keep-alive connection."""

    def __init__(
        self,
        handler: Handler,
        limits: HttpLimits,
        timeouts: Timeouts,
        tracker: ConnectionTracker,
        capacity: Capacity | None = None,
        protocol_of: ProtocolOf | None = None,
    ) -> None:
        self._handler = handler
        self._capacity = capacity
        self._protocol_of = protocol_of or _vendor_a
        self._shedding: bytearray | None = None
        self._lingering = False
        self._head_timer = False
        self._http = ServerConnection(limits)
        self._timeouts = timeouts
        self._tracker = tracker
        self._flow = FlowControl()
        self._transport: asyncio.Transport | None = None
        self._task: asyncio.Task[None] | None = None
        self._held = bytearray()
        self._loop = asyncio.get_running_loop()
        self._timer = LazyTimer(self._loop, self._timed_out)

    @property
    def busy(self) -> bool:
        """True while a request is being handled."""
        return self._task is not None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        self._tracker.connections.add(self)
        # A connection that never sends a byte gets no longer than one that sends its head slowly.
        self._arm_timer(self._timeouts.request_read)
        self._head_timer = True

    def connection_lost(self, exc: Exception | None) -> None:
        self._tracker.connections.discard(self)
        self._head_timer = False
        self._timer.drop()
        self._flow.close()
        if self._task is not None:
            self._task.cancel()

    def pause_writing(self) -> None:
        self._flow.pause()

    def resume_writing(self) -> None:
        self._flow.resume()

    def data_received(self, data: bytes) -> None:
        if self._lingering:
            return
        if self._task is not None:
            # Reading goes on while a request is served, only so that a departed client is noticed at once (its
            # handler is cancelled); bytes of a next request wait until this one is answered.
            self._held += data
            assert self._transport is not None
            self._transport.pause_reading()
            return
        if self._shedding is not None:
            self._shed(data)
            return
        starting = self._http.waiting_for_request
        if starting and self._capacity is not None and self._capacity.full:
            self._shedding = bytearray()
            self._shed(data)
            return
        events = self._http.receive(data)
        if starting and self._task is None and not self._head_timer:
            self._arm_timer(self._timeouts.request_read)
            self._head_timer = True
        self._dispatch(events)

    def _shed(self, data: bytes) -> None:
        """Refuse a request of an overloaded listener once its request line (not its body) has arrived."""
        assert self._shedding is not None
        self._shedding += data
        line_end = self._shedding.find(b"\n")
        if line_end < 0 and len(self._shedding) < _SHED_LINE_BYTES and data:
            return
        parts = bytes(self._shedding[: max(line_end, 0)]).split(b" ")
        path = parts[1].partition(b"?")[0].decode("latin-1") if len(parts) > 1 else ""
        self._reject(_OVERLOADED, path)

    def _dispatch(self, events: list[RequestReceived | ProtocolFailure]) -> None:
        for event in events:
            if isinstance(event, ProtocolFailure):
                self._reject(event)
                return
            if self._capacity is not None:
                if self._capacity.full:
                    self._reject(_OVERLOADED, event.request.path)
                    return
                self._capacity.active += 1
            self._cancel_timer()
            self._task = self._loop.create_task(self._serve(event.request))
            return

    def _reject(self, failure: ProtocolFailure, path: str | None = None) -> None:
        assert self._transport is not None
        self._cancel_timer()
        protocol = self._protocol_of(self._http.target_path if path is None else path)
        extra = _RETRY_AFTER if failure.code is ErrorCode.OVERLOADED else ""
        self._transport.write(failure_response(failure, new_request_id(), protocol, extra))
        self._linger()

    def _linger(self) -> None:
        """Stop answering but keep reading (and dropping) until the client closes or `LINGER_SECONDS` pass."""
        assert self._transport is not None
        self._lingering = True
        self._shedding = None
        if self._transport.can_write_eof():
            self._transport.write_eof()
        self._transport.resume_reading()
        self._arm_timer(LINGER_SECONDS)

    async def _serve(self, request: Request) -> None:
        request.request_id = new_request_id()
        try:
            response = await self._handler(request)
            await self._write(request, response)
        except (ConnectionError, asyncio.CancelledError):
            self._close()
            return
        except Exception:
            logger.exception("request %s failed inside the server", request.request_id)
            self._fail_unexpectedly(request)
            return
        finally:
            self._task = None
            if self._capacity is not None:
                self._capacity.active -= 1
        self._next_cycle()

    def _fail_unexpectedly(self, request: Request) -> None:
        """A handler bug: answer 500 if no byte of the response went out yet, and close either way."""
        if self._transport is not None and not self._http.response_started:
            failure = ProtocolFailure(500, ErrorCode.INTERNAL_ERROR, "internal error")
            self._transport.write(failure_response(failure, request.request_id, self._protocol_of(request.path)))
        self._close()

    async def _write(self, request: Request, response: Response) -> None:
        transport = self._transport
        assert transport is not None
        headers = [*response.headers, (b"x-request-id", request.request_id.encode())]
        if self._tracker.draining:
            headers.append((b"connection", b"close"))
        if response.stream is None:
            transport.write(self._http.send_response(response.status, headers, response.body))
            return
        stream = response.stream
        head = self._http.send_head(response.status, headers)
        try:
            if not response.first_chunk_ready:
                transport.write(head)
                head = b""
            async for chunk in stream:
                transport.write(head + self._http.send_data(chunk))
                head = b""
                await self._flow.drain()
            transport.write(head + self._http.send_end())
        finally:
            # A client gone mid-stream ends the producer now (its upstream closes, its usage settles), not
            # whenever the garbage collector finalizes it.
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()

    def _next_cycle(self) -> None:
        if self._transport is None or self._transport.is_closing():
            return
        if self._tracker.draining or not self._http.next_cycle():
            self._close()
            return
        self._arm_timer(self._timeouts.idle)
        self._head_timer = False
        self._transport.resume_reading()
        self._dispatch(self._http.pending_events())
        if self._held and self._task is None:
            held, self._held = bytes(self._held), bytearray()
            self.data_received(held)

    def close_if_idle(self) -> None:
        """Close now unless a request is in flight (used by shutdown)."""
        if self._task is None:
            self._close()

    def _close(self) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()

    def abort(self) -> None:
        """Drop the connection at once (the drain deadline passed)."""
        if self._transport is not None:
            self._transport.abort()

    def _arm_timer(self, seconds: float) -> None:
        self._head_timer = False
        self._timer.set(seconds)

    def _cancel_timer(self) -> None:
        self._head_timer = False
        self._timer.clear()

    def _timed_out(self) -> None:
        self._head_timer = False
        if self._lingering or self._http.waiting_for_request:
            self._close()
            return
        self._reject(ProtocolFailure(408, ErrorCode.REQUEST_TIMEOUT, "the request was not received in time"))


class TlsHttpProtocol(HttpProtocol, SharedTlsReads):
    """`HttpProtocol` behind TLS (see `gatewayproxy.server.tls_reads`)."""
