"""MCP over SSE (the 2024-11-05 transport) on `/v1/mcp/sse`, bridged to the destination's Streamable HTTP endpoint.

`GET /v1/mcp/sse` opens the client's event stream and names its message endpoint
(`/v1/mcp/sse?session_id=<random token>`); each `POST` there is relayed to the upstream as a Streamable HTTP
request under the upstream session the gateway keeps for that stream, and the upstream's answers are written to
the stream as `message` events. Tokens are bound to the principal that opened the stream. With several workers a
token also names the worker holding its stream, and a POST that lands on another worker is served by that one
(`gatewayproxy.planes.sse_peers`).
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from urllib.parse import parse_qs

import orjson

from gatewayproxy.context import RequestContext
from gatewayproxy.errors import ErrorCode, GatewayError, Protocol, error_body
from gatewayproxy.http.connection import Request
from gatewayproxy.http.sse import SseDecoder, encode_event
from gatewayproxy.planes.mcp import (
    SESSION_HEADER,
    TOOLS_CALL,
    McpProxy,
    SessionOwner,
    governed_message,
    inspect_tool_result,
    jsonrpc_id,
)
from gatewayproxy.planes.sse_peers import SsePeers
from gatewayproxy.server.protocol import Response

SSE_PATH = "/v1/mcp/sse"
EVENT_STREAM = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no")]
KEEPALIVE_SECONDS = 15.0
UPSTREAM_HEADERS = [(b"content-type", b"application/json"), (b"accept", b"application/json, text/event-stream")]


@dataclass
class SseSession:
    """One client's event stream: who opened it, where it goes, and the messages waiting to be written."""

    owner: SessionOwner
    outgoing: asyncio.Queue[bytes] = field(default_factory=asyncio.Queue)
    upstream_session: bytes | None = None


def upstream_messages(content_type: bytes, body: bytes) -> list[bytes]:
    """The JSON-RPC messages of a Streamable HTTP answer (a JSON body or an event stream), one line each."""
    if content_type.startswith(b"text/event-stream"):
        events = SseDecoder().feed(body + b"\n\n")
        return [event.data.encode() for event in events if event.event in ("", "message") and event.data]
    return [orjson.dumps(orjson.loads(body))] if body.strip() else []


async def next_frame(outgoing: asyncio.Queue[bytes]) -> bytes:
    """The next message event, or a comment after a quiet spell so a departed client is noticed on write."""
    try:
        async with asyncio.timeout(KEEPALIVE_SECONDS):
            return await outgoing.get()
    except TimeoutError:
        return b": keepalive\n\n"


class SseBridge:
    """Serves `/v1/mcp/sse`: event streams on GET, their messages on POST."""

    def __init__(self, proxy: McpProxy, peers: SsePeers | None = None) -> None:
        self.proxy = proxy
        self.peers = peers
        self.sessions: dict[str, SseSession] = {}

    async def forwarded(self, request: Request) -> Response | None:
        """The answer of the sibling worker holding the stream of a message POST, when another worker holds it
        (None: this worker serves the request)."""
        if self.peers is None or request.method != "POST":
            return None
        token = parse_qs(request.query).get("session_id", [""])[0]
        holder = self.peers.holder(token)
        if holder is None or token in self.sessions:
            return None
        try:
            return await self.peers.forward(holder, request)
        except GatewayError as error:
            body = error_body(Protocol.JSONRPC, error.code.value, error.message, error.status, jsonrpc_id(request.body))
            return Response(error.status, [(b"content-type", b"application/json")], orjson.dumps(body))

    async def serve(self, context: RequestContext, finish: Callable[[RequestContext], None]) -> Response:
        """Open a stream or deliver a message."""
        method = context.request.method
        if method not in ("GET", "POST"):
            raise GatewayError(ErrorCode.METHOD_NOT_ALLOWED, "MCP over SSE accepts GET and POST")
        context.principal = await context.state.identity.authenticate(context.request.headers)
        if method == "GET":
            if self.peers is not None:
                await self.peers.listen()
            return self._open(context, finish)
        return await self._deliver(context)

    def _open(self, context: RequestContext, finish: Callable[[RequestContext], None]) -> Response:
        name, _ = self.proxy.destination(context, None)
        token = secrets.token_urlsafe(24)
        if self.peers is not None:
            token = self.peers.tag(token)
        session = SseSession(SessionOwner(context.principal.id, name))
        self.sessions[token] = session

        async def events() -> AsyncIterator[bytes]:
            try:
                yield encode_event(f"{SSE_PATH}?session_id={token}".encode(), "endpoint")
                while True:
                    yield await next_frame(session.outgoing)
            finally:
                self.sessions.pop(token, None)
                context.status = 200
                finish(context)

        return Response(200, EVENT_STREAM, stream=events())

    def _session(self, context: RequestContext) -> SseSession:
        token = parse_qs(context.request.query).get("session_id", [""])[0]
        session = self.sessions.get(token)
        if session is None or session.owner.principal != context.principal.id:
            raise GatewayError(ErrorCode.NOT_FOUND, "unknown MCP session")
        return session

    async def _deliver(self, context: RequestContext) -> Response:
        """Relay one message; a failure to relay it (a refusal by a stage included) answers the message on the
        stream, where an SSE client waits for its answer."""
        session = self._session(context)
        try:
            messages = await self._relay(context, session)
        except GatewayError as error:
            context.error_code = error.code.value
            rpc_id = jsonrpc_id(context.request.body)
            messages = [
                orjson.dumps(error_body(Protocol.JSONRPC, error.code.value, error.message, error.status, rpc_id))
            ]
        for message in messages:
            session.outgoing.put_nowait(encode_event(message, "message"))
        return Response(202, [(b"content-type", b"text/plain")], b"Accepted")

    async def _relay(self, context: RequestContext, session: SseSession) -> list[bytes]:
        """The upstream's answers to one message, after the stages admitted it and judged a tool's result."""
        destination = context.state.config.destinations.get(session.owner.destination)
        if destination is None:
            raise GatewayError(ErrorCode.NO_ROUTE, f"destination {session.owner.destination!r} is gone")
        context.destination = session.owner.destination
        message = context.body = governed_message(context)
        await context.state.runner.admit(context)
        body = context.request.body if context.body is message else orjson.dumps(context.body)
        headers = UPSTREAM_HEADERS
        if session.upstream_session is not None:
            headers = [*headers, (SESSION_HEADER.encode(), session.upstream_session)]
        upstream = await self.proxy.call(context, destination, b"POST", headers, body)
        session.upstream_session = upstream.header(SESSION_HEADER.encode()) or session.upstream_session
        content_type = upstream.header(b"content-type") or b""
        answer = await upstream.read()
        if upstream.status >= 400:
            raise GatewayError(ErrorCode.UPSTREAM_ERROR, f"MCP server answered {upstream.status}")
        if context.state.output_inspectors and message.get("method") == TOOLS_CALL:
            await inspect_tool_result(context, content_type, answer, message.get("id"))
        try:
            return upstream_messages(content_type, answer)
        except orjson.JSONDecodeError:
            raise GatewayError(ErrorCode.UPSTREAM_ERROR, "MCP server answered with invalid JSON") from None
