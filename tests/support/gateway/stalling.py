"""A provider on loopback that misbehaves on purpose (stalls after its head, after a first stream event, never
answers, or holds each request until released) and records when each of its connections was closed by the
gateway."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field

from tests.support.gateway.loop_server import LoopService
from tests.support.gateway.provider import answer


@dataclass
class Connection:
    """One accepted connection: requests read on it, and when the gateway closed it (monotonic seconds)."""

    writer: asyncio.StreamWriter
    requests: int = 0
    closed_at: float | None = None


@dataclass
class StallingUpstream(LoopService):
    """`behaviour` decides every answer: `ok`, `stall_after_head`, `stall_after_first_event`, `never`, `hold`
    (answer ok once `release()` is called)."""

    behaviour: str = "ok"
    connections: list[Connection] = field(default_factory=list)
    port: int = 0

    def __post_init__(self) -> None:
        LoopService.__init__(self)
        self._loop = self._runner.loop
        self._released: asyncio.Event | None = None

    def start(self) -> StallingUpstream:
        def setup() -> None:
            self._released = asyncio.Event()

        self.port = self._runner.serve(self._serve, backlog=1024, setup=setup)
        return self

    @property
    def requests(self) -> int:
        return sum(connection.requests for connection in self.connections)

    @property
    def open_connections(self) -> int:
        return sum(1 for connection in self.connections if connection.closed_at is None)

    def reset(self, behaviour: str) -> None:
        async def clear() -> None:
            # Connections the gateway pooled in an earlier test are closed, so each test counts its own.
            for connection in self.connections:
                connection.writer.close()
            self.behaviour = behaviour
            self.connections.clear()
            self._released = asyncio.Event()

        self._runner.run(clear())  # on the upstream's loop, returning once it ran

    def release(self) -> None:
        """Let every held request (and later ones) be answered."""
        assert self._released is not None
        self._loop.call_soon_threadsafe(self._released.set)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = Connection(writer)
        self.connections.append(connection)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                path = lines[0].split(" ")[1]
                length = next(
                    (int(line.split(":", 1)[1]) for line in lines if line.lower().startswith("content-length:")), 0
                )
                body = json.loads(await reader.readexactly(length)) if length else {}
                connection.requests += 1
                await self._answer(reader, writer, path, body)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            connection.closed_at = time.monotonic()
            writer.close()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str, body: dict) -> None:
        behaviour = self.behaviour
        if behaviour == "never":
            await self._until_closed(reader)
        if behaviour == "hold":
            assert self._released is not None
            await self._released.wait()
        status, document, frames = answer(path, body, "stalling")
        if frames is None:
            data = json.dumps(document).encode()
            writer.write(b"HTTP/1.1 %d OK\r\ncontent-type: application/json\r\n" % status)
            if behaviour == "stall_after_head":
                writer.write(b"content-length: %d\r\n\r\n" % len(data))
                await writer.drain()
                await self._until_closed(reader)
            writer.write(b"content-length: %d\r\n\r\n%s" % (len(data), data))
            await writer.drain()
            return
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        if behaviour == "stall_after_head":
            await writer.drain()
            await self._until_closed(reader)
        for index, frame in enumerate(frames):
            writer.write(b"%x\r\n%s\r\n" % (len(frame), frame))
            await writer.drain()
            if behaviour == "stall_after_first_event" and index == 1:
                await self._until_closed(reader)
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    @staticmethod
    async def _until_closed(reader: asyncio.StreamReader) -> None:
        """Say nothing more; return (raising) only when the gateway closes the connection."""
        while await reader.read(65536):
            pass
        raise ConnectionError("closed by the gateway")
