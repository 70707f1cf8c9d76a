"""What `HttpProtocol` writes for a streamed response: the head with the first chunk when that chunk is ready,
the head alone first when the stream may wait (an MCP event stream must show its head before any event)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import uvloop

from gatewayproxy.http.connection import HttpLimits, Request
from gatewayproxy.server.protocol import ConnectionTracker, HttpProtocol, Response, Timeouts

REQUEST = b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\n\r\n{}"


class RecordingTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []

    def write(self, data: Any) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return False

    def pause_reading(self) -> None:
        """Reading is not modelled."""

    def resume_reading(self) -> None:
        """Reading is not modelled."""


def _writes(first_chunk_ready: bool) -> tuple[list[bytes], list[bytes]]:
    """The writes made before the stream's first chunk was released, and all of them."""

    async def run() -> tuple[list[bytes], list[bytes]]:
        release = asyncio.Event()

        async def stream() -> AsyncIterator[bytes]:
            await release.wait()
            yield b"data: one\n\n"
            yield b"data: two\n\n"

        async def handler(request: Request) -> Response:
            headers = [(b"content-type", b"text/event-stream")]
            return Response(200, headers, stream=stream(), first_chunk_ready=first_chunk_ready)

        protocol = HttpProtocol(handler, HttpLimits(4096, 20, 4096), Timeouts(), ConnectionTracker())
        transport = RecordingTransport()
        protocol.connection_made(transport)
        protocol.data_received(REQUEST)
        for _ in range(5):
            await asyncio.sleep(0)
        before = list(transport.writes)
        release.set()
        for _ in range(10):
            await asyncio.sleep(0)
        protocol.connection_lost(None)
        return before, transport.writes

    return uvloop.run(run())


def test_a_ready_first_chunk_goes_out_with_the_head() -> None:
    before, writes = _writes(first_chunk_ready=True)
    assert before == []
    assert writes[0].startswith(b"HTTP/1.1 200 OK\r\n") and writes[0].endswith(b"data: one\n\n\r\n")
    assert writes[-1] == b"0\r\n\r\n"


def test_a_stream_that_may_wait_sends_its_head_first() -> None:
    before, writes = _writes(first_chunk_ready=False)
    assert len(before) == 1 and before[0].startswith(b"HTTP/1.1 200 OK\r\n") and before[0].endswith(b"\r\n\r\n")
    assert writes[1].endswith(b"data: one\n\n\r\n")
