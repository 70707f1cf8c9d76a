"""MCP over Streamable HTTP: `/v1/mcp` (and the deprecated `/mcp`) relayed to the `mcp` destination of the
matching route, with the vault's credential and the upstream `Mcp-Session-Id` bound to the principal.

Session ids pass through unchanged in both directions: the upstream mints them (the SDK uses random UUIDs,
so they are not guessable), and the gateway remembers which principal and destination each belongs to, so a
session id presented by another principal is refused (404, as for an unknown session) and a known session
keeps reaching the destination that opened it. Ids the gateway has not seen (another replica minted them, or
this one restarted) are passed through for the upstream to accept or refuse.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import orjson

from gatewayproxy.config.models import Destination
from gatewayproxy.context import TOOLS_CALL, RequestContext
from gatewayproxy.errors import ErrorCode, GatewayError
from gatewayproxy.http.sse import SseDecoder
from gatewayproxy.planes.mcp_resolver import McpResolver
from gatewayproxy.planes.passthrough import call_once, picked_headers, relayed_headers, resolve_secret, streamed
from gatewayproxy.server.protocol import Response
from gatewayproxy.server.upstream import Origin, UpstreamResponse
from gatewayproxy.state import Runtime

MCP_PATH = "/v1/mcp"
DEPRECATED_PATH = "/mcp"
SESSION_HEADER = "mcp-session-id"
# What a Streamable HTTP client sends that the server needs; the client's credentials are not among them.
FORWARDED = ("content-type", "accept", SESSION_HEADER, "mcp-protocol-version", "last-event-id")
# An upstream auth challenge is about the gateway's credential, which the client cannot change.
UNRELAYED = frozenset({"www-authenticate", "set-cookie"})
METHODS = ("POST", "GET", "DELETE")
MAX_SESSIONS = 100_000


def jsonrpc_id(body: bytes) -> Any:
    """The `id` of a JSON-RPC request body, for the error that answers it (None when there is none)."""
    try:
        message = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        return None
    rpc_id = message.get("id") if isinstance(message, dict) else None
    return rpc_id if isinstance(rpc_id, str | int) and not isinstance(rpc_id, bool) else None


def governed_message(context: RequestContext) -> dict[str, Any]:
    """The JSON-RPC request the stages judge (its method, a tool's name and arguments); empty when no stage runs or
    the request carries none. A batch cannot be judged call by call, so it is refused when stages run."""
    request = context.request
    if not context.state.stages or request.method != "POST":
        return {}
    try:
        message = orjson.loads(request.body) if request.body else None
    except orjson.JSONDecodeError:
        return {}
    if isinstance(message, list):
        raise GatewayError(ErrorCode.INVALID_REQUEST, "JSON-RPC batches are not accepted here; send one message")
    return message if isinstance(message, dict) else {}


def tool_result_text(content_type: bytes, body: bytes, rpc_id: Any) -> str:
    """The text of the `tools/call` result answering `rpc_id` in a JSON or event-stream answer: its text
    content items and its structured content."""
    if content_type.startswith(b"text/event-stream"):
        payloads = [event.data for event in SseDecoder().feed(body + b"\n\n") if event.data]
    else:
        payloads = [body.decode("utf-8", "replace")] if body.strip() else []
    for payload in payloads:
        try:
            message = orjson.loads(payload)
        except orjson.JSONDecodeError:
            continue
        if isinstance(message, dict) and message.get("id") == rpc_id and isinstance(message.get("result"), dict):
            result = message["result"]
            texts = [
                item["text"]
                for item in result.get("content") or []
                if isinstance(item, dict) and isinstance(item.get("text"), str)
            ]
            if result.get("structuredContent") is not None:
                texts.append(orjson.dumps(result["structuredContent"]).decode())
            return "\n".join(texts)
    return ""


async def inspected_tool_result(context: RequestContext, upstream: UpstreamResponse, rpc_id: Any) -> Response:
    """The upstream's whole answer to a `tools/call`, relayed once the output inspectors have seen its result (they
    raise to block it)."""
    body = await upstream.read()
    await inspect_tool_result(context, upstream.header(b"content-type") or b"", body, rpc_id)
    return Response(upstream.status, relayed_headers(upstream, UNRELAYED), body)


async def inspect_tool_result(context: RequestContext, content_type: bytes, body: bytes, rpc_id: Any) -> None:
    """Show the output inspectors the `tools/call` result answering `rpc_id` (they raise to block it)."""
    context.output_text = tool_result_text(content_type, body, rpc_id)
    context.output_complete = True
    if context.output_text:
        for stage in context.state.output_inspectors:
            await stage.inspect_output(context, context.output_text)


@dataclasses.dataclass(frozen=True)
class SessionOwner:
    """Who opened an upstream MCP session, and where."""

    principal: str
    destination: str


class SessionTable:
    """Upstream session ids and their owners, least recently used forgotten first beyond `capacity`."""

    def __init__(self, capacity: int = MAX_SESSIONS) -> None:
        self.capacity = capacity
        self._owners: OrderedDict[str, SessionOwner] = OrderedDict()

    def owner(self, session_id: str, principal: str) -> SessionOwner | None:
        """The owner of a known session; a session of another principal is refused as unknown."""
        owner = self._owners.get(session_id)
        if owner is None:
            return None
        if owner.principal != principal:
            raise GatewayError(ErrorCode.NOT_FOUND, "unknown MCP session")
        self._owners.move_to_end(session_id)
        return owner

    def bind(self, session_id: str, owner: SessionOwner) -> None:
        """Remember the owner of a session the upstream announced."""
        self._owners[session_id] = owner
        self._owners.move_to_end(session_id)
        while len(self._owners) > self.capacity:
            self._owners.popitem(last=False)

    def forget(self, session_id: str) -> None:
        """The session was terminated."""
        self._owners.pop(session_id, None)


class McpProxy:
    """Serves MCP requests from the current snapshot's routes and `mcp` destinations."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.sessions = SessionTable()
        self.resolver = McpResolver(runtime.pool)

    async def serve(self, context: RequestContext, finish: Callable[[RequestContext], None]) -> Response:
        """Relay one MCP request; raises `GatewayError` for anything refused before the upstream."""
        request = context.request
        if request.method not in METHODS:
            raise GatewayError(ErrorCode.METHOD_NOT_ALLOWED, f"MCP accepts {', '.join(METHODS)}")
        context.principal = await context.state.identity.authenticate(request.headers)
        session_id = request.headers.get(SESSION_HEADER)
        owner = self.sessions.owner(session_id, context.principal.id) if session_id else None
        name, destination = self.destination(context, owner)
        message = context.body = governed_message(context)
        await context.state.runner.admit(context)
        # A guardrail that redacted the call's arguments replaced the body; send what it left.
        body = request.body if context.body is message else orjson.dumps(context.body)
        headers = picked_headers(request.headers, FORWARDED)
        upstream = await self.call(context, destination, request.method.encode(), headers, body, request.query)
        self._track_session(request.method, session_id, upstream, SessionOwner(context.principal.id, name))
        if context.state.output_inspectors and message.get("method") == TOOLS_CALL:
            return await inspected_tool_result(context, upstream, message.get("id"))
        return streamed(upstream, relayed_headers(upstream, UNRELAYED), context, finish)

    def destination(self, context: RequestContext, owner: SessionOwner | None) -> tuple[str, Destination]:
        """The `mcp` destination of the route matching `/v1/mcp` (the session's own one when it has one)."""
        canonical = dataclasses.replace(context, request=dataclasses.replace(context.request, path=MCP_PATH))
        route = context.state.router.match(canonical)
        if route is None:
            raise GatewayError(ErrorCode.NO_ROUTE, f"no route serves {MCP_PATH}")
        context.route = route.name
        destinations = context.state.config.destinations
        names = [
            target.destination
            for target in route.plan(canonical).targets
            if destinations.get(target.destination, None) is not None and destinations[target.destination].kind == "mcp"
        ]
        if owner is not None and owner.destination in destinations:
            names = [owner.destination]
        if not names:
            raise GatewayError(ErrorCode.NO_ROUTE, f"route {route.name!r} has no mcp destination")
        context.destination = names[0]
        # A wildcard (resolver-based) destination is resolved to a server per request, in `call`.
        return names[0], destinations[names[0]]

    async def call(
        self,
        context: RequestContext,
        destination: Destination,
        method: bytes,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        query: str = "",
    ) -> UpstreamResponse:
        """One upstream request with the destination's credential; an upstream refusing it is a 502."""
        destination = await self.resolver.concrete(destination, context.request.headers, context.scope)
        origin = Origin.parse(destination.base_url or destination.url or "")
        target = ((origin.base_path or "/") + (f"?{query}" if query else "")).encode()
        vault = context.state.vaults[destination.vault_name]
        secret = await resolve_secret(vault, destination.credential_id, context.scope)
        headers = [*headers, (b"authorization", b"Bearer " + secret.token.encode())]
        timeout = context.state.config.server.request_timeout_ms / 1000
        upstream = await call_once(self.runtime.pool, origin, method, target, headers, body, timeout, context)
        if upstream.status in (401, 403):
            await upstream.read()
            raise GatewayError(
                ErrorCode.UPSTREAM_ERROR, f"MCP server {context.destination!r} refused the gateway's credential"
            )
        return upstream

    def _track_session(self, method: str, sent: str | None, upstream: UpstreamResponse, owner: SessionOwner) -> None:
        if method == "DELETE" and sent and 200 <= upstream.status < 300:
            self.sessions.forget(sent)
            return
        announced = upstream.header(SESSION_HEADER.encode())
        if announced:
            self.sessions.bind(announced.decode("latin-1"), owner)
