"""One asyncio.Protocol per client connection: reads requests through the sans-IO layer, runs the handler,
writes its response (streamed with backpressure), and enforces the read and idle timeouts."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import cast

from gatewayproxy.errors import ErrorCode
from gatewayproxy.http.connection import (
    HttpLimits,
    ProtocolFailure,
    Request,
    RequestReceived,
    ServerConnection,
    failure_response,
)
from gatewayproxy.server.flow import FlowControl

logger = logging.getLogger("gatewayproxy.server")


@dataclass
class Response:
    """What a handler answers: a whole `body`, or a `stream` of body chunks."""

    status: int
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    body: bytes = b""
    stream: AsyncIterator[bytes] | None = None


Handler = Callable[[Request], Awaitable[Response]]


@dataclass(frozen=True)
class Timeouts:
    """Seconds a client may take to send a request, and to start the next one on a kept-alive connection."""

    request_read: float = 10.0
    idle: float = 75.0


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

    def __init__(self, handler: Handler, limits: HttpLimits, timeouts: Timeouts, tracker: ConnectionTracker) -> None:
        self._handler = handler
        self._http = ServerConnection(limits)
        self._timeouts = timeouts
        self._tracker = tracker
        self._flow = FlowControl()
        self._transport: asyncio.Transport | None = None
        self._task: asyncio.Task[None] | None = None
        self._held = bytearray()
        self._timer: asyncio.TimerHandle | None = None
        self._loop = asyncio.get_running_loop()

    @property
    def busy(self) -> bool:
        """True while a request is being handled."""
        return self._task is not None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        self._tracker.connections.add(self)
        self._arm_timer(self._timeouts.idle)

    def connection_lost(self, exc: Exception | None) -> None:
        self._tracker.connections.discard(self)
        self._cancel_timer()
        self._flow.close()
        if self._task is not None:
            self._task.cancel()

    def pause_writing(self) -> None:
        self._flow.pause()

    def resume_writing(self) -> None:
        self._flow.resume()

    def data_received(self, data: bytes) -> None:
        if self._task is not None:
            # Reading resumes while a response streams, only so that a departed client is noticed at once; bytes
            # of a next request wait until this one is answered.
            self._held += data
            assert self._transport is not None
            self._transport.pause_reading()
            return
        starting = self._http.waiting_for_request
        events = self._http.receive(data)
        if starting and self._task is None:
            self._arm_timer(self._timeouts.request_read)
        self._dispatch(events)

    def _dispatch(self, events: list[RequestReceived | ProtocolFailure]) -> None:
        for event in events:
            if isinstance(event, ProtocolFailure):
                self._reject(event)
                return
            assert self._transport is not None
            self._cancel_timer()
            self._transport.pause_reading()
            self._task = self._loop.create_task(self._serve(event.request))
            return

    def _reject(self, failure: ProtocolFailure) -> None:
        assert self._transport is not None
        self._cancel_timer()
        self._transport.write(failure_response(failure, new_request_id()))
        self._transport.close()

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
        self._next_cycle()

    def _fail_unexpectedly(self, request: Request) -> None:
        """A handler bug: answer 500 if no byte of the response went out yet, and close either way."""
        if self._transport is not None and not self._http.response_started:
            failure = ProtocolFailure(500, ErrorCode.INTERNAL_ERROR, "internal error")
            self._transport.write(failure_response(failure, request.request_id))
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
        transport.write(self._http.send_head(response.status, headers))
        transport.resume_reading()
        async for chunk in response.stream:
            transport.write(self._http.send_data(chunk))
            await self._flow.drain()
        transport.write(self._http.send_end())

    def _next_cycle(self) -> None:
        if self._transport is None or self._transport.is_closing():
            return
        if self._tracker.draining or not self._http.next_cycle():
            self._close()
            return
        self._arm_timer(self._timeouts.idle)
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
        self._cancel_timer()
        self._timer = self._loop.call_later(seconds, self._timed_out)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _timed_out(self) -> None:
        self._timer = None
        if self._http.waiting_for_request:
            self._close()
            return
        self._reject(ProtocolFailure(408, ErrorCode.REQUEST_TIMEOUT, "the request was not received in time"))
