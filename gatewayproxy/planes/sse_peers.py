"""MCP over SSE across worker processes: a stream lives in the worker that accepted its GET, and a message POST
may land on any worker (SO_REUSEPORT spreads connections). The session token names its worker; a POST for another
worker's session is handed whole to that worker over its Unix socket in the workers' private run directory, where
it is served exactly as if it had arrived there (identity, stages, accounting), and its answer comes back. A
worker listens on its socket from the first stream it opens (only a worker holding streams is ever asked).

Frames on the socket: a 4-byte big-endian length, then a JSON document; one request and its answer per connection.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import struct
from typing import Any

import orjson
from prometheus_client import CollectorRegistry, Counter

from gatewayproxy.errors import ErrorCode, GatewayError
from gatewayproxy.http.connection import Request
from gatewayproxy.server.protocol import Handler, Response
from gatewayproxy.server.workers import Worker

logger = logging.getLogger("gatewayproxy.mcp")
LENGTH = struct.Struct(">I")
MAX_FRAME = 64 * 1024 * 1024
# Headers the forwarding worker's own connection writes; the owner's copies are dropped.
HOP_HEADERS = frozenset({b"x-request-id", b"content-length", b"transfer-encoding", b"connection"})


async def _read_frame(reader: asyncio.StreamReader) -> Any:
    (length,) = LENGTH.unpack(await reader.readexactly(LENGTH.size))
    if length > MAX_FRAME:
        raise ValueError("frame too large")
    return orjson.loads(await reader.readexactly(length))


def _write_frame(writer: asyncio.StreamWriter, document: Any) -> None:
    payload = orjson.dumps(document)
    writer.write(LENGTH.pack(len(payload)) + payload)


class SsePeers:
    """This worker's link to its siblings for MCP-over-SSE messages."""

    def __init__(self, worker: Worker, handler: Handler, registry: CollectorRegistry) -> None:
        self.worker = worker
        self.handler = handler
        self.forwarded = Counter(
            "gateway_mcp_sse_forwarded",
            "MCP-over-SSE messages handed to the sibling worker holding their stream.",
            registry=registry,
        )
        self._server: asyncio.AbstractServer | None = None

    def tag(self, token: str) -> str:
        """A session token naming this worker as the stream's holder."""
        return f"{token}.{self.worker.index}"

    def holder(self, token: str) -> int | None:
        """The sibling worker holding the session `token` names (None: this one, or no worker at all)."""
        _, dot, index = token.rpartition(".")
        if not dot or not index.isdigit():
            return None
        holder = int(index)
        return holder if holder != self.worker.index and holder < self.worker.count else None

    async def listen(self) -> None:
        """Accept siblings' requests from now on (idempotent)."""
        if self._server is not None:
            return
        path = self.worker.socket_path(self.worker.index)
        if os.path.exists(path):
            os.unlink(path)
        self._server = await asyncio.start_unix_server(self._serve, path)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            document = await _read_frame(reader)
            request = Request(
                method=document["method"],
                path=document["path"],
                query=document["query"],
                headers=document["headers"],
                body=base64.b64decode(document["body"]),
                request_id=document["request_id"],
            )
            response = await self.handler(request)
            body = response.body
            if response.stream is not None:  # a message POST is answered whole; read one that is not anyway
                body = b"".join([chunk async for chunk in response.stream])
            headers = [[name.decode("latin-1"), value.decode("latin-1")] for name, value in response.headers]
            _write_frame(
                writer, {"status": response.status, "headers": headers, "body": base64.b64encode(body).decode()}
            )
            await writer.drain()
        except (OSError, ValueError, KeyError, asyncio.IncompleteReadError) as error:
            logger.warning("a sibling worker's MCP message could not be served: %s", error)
        finally:
            writer.close()

    async def forward(self, holder: int, request: Request) -> Response:
        """`request` served by worker `holder`; its answer as this worker's response."""
        self.forwarded.inc()
        try:
            reader, writer = await asyncio.open_unix_connection(self.worker.socket_path(holder))
        except OSError:
            raise GatewayError(ErrorCode.NOT_FOUND, "unknown MCP session") from None
        try:
            _write_frame(
                writer,
                {
                    "method": request.method,
                    "path": request.path,
                    "query": request.query,
                    "headers": request.headers,
                    "body": base64.b64encode(request.body).decode(),
                    "request_id": request.request_id,
                },
            )
            await writer.drain()
            answer = await _read_frame(reader)
        except (OSError, ValueError, asyncio.IncompleteReadError):
            raise GatewayError(ErrorCode.NOT_FOUND, "unknown MCP session") from None
        finally:
            writer.close()
        headers = [
            (name.encode("latin-1"), value.encode("latin-1"))
            for name, value in answer["headers"]
            if name.encode("latin-1") not in HOP_HEADERS
        ]
        return Response(answer["status"], headers, base64.b64decode(answer["body"]))

    async def close(self) -> None:
        """Stop accepting siblings' requests."""
        if self._server is not None:
            self._server.close()
            self._server = None
