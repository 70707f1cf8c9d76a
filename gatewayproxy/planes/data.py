"""The data plane: maps paths to operations and protocols, runs identity and routing, then the snapshot's stage
runner (admission) and dispatch; every error is answered in the protocol of its path. A request gets
`server.request_timeout_ms` until its whole answer (a stream: its first byte), then 504 `upstream_timeout`. Once a
request is done, or its client has gone, it counts it in the metrics and hands it to the stage runner's
settlement."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import orjson

from gatewayproxy.context import Operation, Plan, RequestContext
from gatewayproxy.errors import ErrorCode, GatewayError, Protocol
from gatewayproxy.http.connection import Request
from gatewayproxy.pipeline.dispatch import JSON_CONTENT, Dispatch, Finish, error_response
from gatewayproxy.pipeline.fanout import FanOutDispatch, wants_fan_out
from gatewayproxy.pipeline.responses import ITEM_METHODS, ResponsesDispatch, response_id_of
from gatewayproxy.planes.mcp import DEPRECATED_PATH as DEPRECATED_MCP_PATH
from gatewayproxy.planes.mcp import McpProxy, jsonrpc_id
from gatewayproxy.planes.mcp_sse import SSE_PATH, SseBridge
from gatewayproxy.planes.native import PREFIX as NATIVE_PREFIX
from gatewayproxy.planes.native import NativeProxy
from gatewayproxy.planes.sse_peers import SsePeers
from gatewayproxy.server import workers
from gatewayproxy.server.protocol import Response
from gatewayproxy.server.timers import Deadlines
from gatewayproxy.state import Runtime

logger = logging.getLogger("gatewayproxy.data")
Serve = Callable[[RequestContext, Finish], Awaitable[Response]]
# The `no_route` messages: of a model request, and of a stored response's request (routed by path alone).
NO_ROUTE_FOR_MODEL = "no route serves model {model!r} on {path}"
NO_ROUTE_FOR_PATH = "no route serves {path}"
# The status recorded for a request whose client closed the connection before its answer (nginx's 499).
CLIENT_CLOSED = 499


@dataclass(frozen=True)
class Endpoint:
    """A data-plane path: the operation it performs and the protocol it speaks."""

    operation: Operation
    protocol: Protocol


ENDPOINTS = {
    "/v1/chat/completions": Endpoint(Operation.CHAT, Protocol.VENDOR_A),
    "/v1/embeddings": Endpoint(Operation.EMBEDDINGS, Protocol.VENDOR_A),
    "/v1/messages": Endpoint(Operation.MESSAGES, Protocol.VENDOR_B),
    "/v1/llm/v1/messages": Endpoint(Operation.MESSAGES, Protocol.VENDOR_B),
    "/v1/responses": Endpoint(Operation.RESPONSES, Protocol.VENDOR_A),
    "/v1/llm/responses": Endpoint(Operation.RESPONSES, Protocol.VENDOR_A),
    "/v1/llm/v1/responses": Endpoint(Operation.RESPONSES, Protocol.VENDOR_A),
}
MCP_PATHS = ("/v1/mcp", "/v1/mcp/sse", "/mcp")
# Parameters with which other proxies let a client pick the upstream; here the config alone decides.
UPSTREAM_CHOOSING_KEYS = frozenset(
    {
        "api_base",
        "base_url",
        "api_url",
        "azure_endpoint",
        "endpoint_url",
        "custom_llm_provider",
        "api_key",
        "extra_headers",
        "extra_query",
    }
)


def protocol_of_path(path: str) -> Protocol:
    """The protocol a data-plane path speaks (for errors answered before the request is read whole)."""
    endpoint = ENDPOINTS.get(path)
    if endpoint is not None:
        return endpoint.protocol
    return Protocol.JSONRPC if path in MCP_PATHS else Protocol.VENDOR_A


def _is_agent_session_path(path: str) -> bool:
    parts = path.split("/")
    return path == "/v1/agent/sessions" or (
        len(parts) == 6 and path.startswith("/v1/agent/sessions/") and parts[5] == "steps" and bool(parts[4])
    )


def parse_body(request: Request) -> dict:
    """The JSON object body of a request; anything else is 400 `invalid_request`."""
    try:
        body = orjson.loads(request.body)
    except orjson.JSONDecodeError:
        raise GatewayError(ErrorCode.INVALID_REQUEST, "the request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise GatewayError(ErrorCode.INVALID_REQUEST, "the request body must be a JSON object")
    chosen = sorted(UPSTREAM_CHOOSING_KEYS.intersection(body))
    if chosen:
        raise GatewayError(
            ErrorCode.INVALID_REQUEST, f"`{chosen[0]}` is not accepted: the gateway chooses the upstream"
        )
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise GatewayError(ErrorCode.INVALID_REQUEST, "`model` is required")
    return body


def _dispatch_class(context: RequestContext) -> type[Dispatch]:
    """The dispatch of a request: the responses API's, fan-out for a chat `n > 1` or several embedding inputs, else
    the plain one."""
    if context.operation is Operation.RESPONSES:
        return ResponsesDispatch
    if wants_fan_out(context.operation, context.body):
        return FanOutDispatch
    return Dispatch


def _routed(context: RequestContext, unrouted: str) -> Plan:
    """The plan of the route that serves the request; 404 `no_route` with `unrouted` (a template of the `model`
    and `path`) when none does."""
    route = context.state.router.match(context)
    if route is None:
        raise GatewayError(ErrorCode.NO_ROUTE, unrouted.format(model=context.model, path=context.request.path))
    context.route = route.name
    context.plan = plan = route.plan(context)
    return plan


class DataPlane:
    """The handler of the data-plane listener."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.native = NativeProxy(runtime)
        self.mcp = McpProxy(runtime)
        worker = workers.current()  # one of several worker processes: MCP-over-SSE messages may need a sibling
        peers = SsePeers(worker, self, runtime.metrics.registry) if worker is not None else None
        self.mcp_sse = SseBridge(self.mcp, peers)
        self.deadlines = Deadlines()

    async def __call__(self, request: Request) -> Response:
        endpoint = ENDPOINTS.get(request.path)
        if endpoint is None:
            return await self._other(request)
        if request.method != "POST":
            return self._error(
                endpoint.protocol, GatewayError(ErrorCode.METHOD_NOT_ALLOWED, f"{request.method} is not allowed here")
            )
        return await self._run(
            RequestContext(
                request=request, operation=endpoint.operation, protocol=endpoint.protocol, state=self.runtime.state
            ),
            self._serve,
        )

    async def _run(self, context: RequestContext, serve: Serve) -> Response:
        """Serve a request, answering any failure in the protocol of its path, and account for it."""
        request = context.request
        self.runtime.metrics.in_flight.inc()
        self.runtime.in_flight.enter(context.state)
        deadline = self.deadlines.enter(context.state.config.server.request_timeout_ms / 1000)
        try:
            try:
                response = await serve(context, self.finish)
            finally:
                timed_out = self.deadlines.leave(deadline)
        except asyncio.CancelledError:
            if not timed_out:
                # The client went away: its upstream attempt was cancelled with it; settle what was used.
                context.status = CLIENT_CLOSED
                self.finish(context)
                raise
            error = GatewayError(ErrorCode.UPSTREAM_TIMEOUT, "the request did not complete within the deadline")
            context.error_code = error.code.value
            response = self._error(context.protocol, error, request)
        except GatewayError as error:
            context.error_code = error.code.value
            response = self._error(context.protocol, error, request)
        except Exception:
            logger.exception("request %s failed", request.request_id)
            context.error_code = ErrorCode.INTERNAL_ERROR.value
            response = self._error(context.protocol, GatewayError(ErrorCode.INTERNAL_ERROR, "internal error"), request)
        if context.response_headers:
            response.headers = [*response.headers, *context.response_headers]
        if response.stream is None:
            context.status = response.status
            self.finish(context)
        return response

    async def _serve(self, context: RequestContext, finish: Finish) -> Response:
        state = context.state
        context.principal = await state.identity.authenticate(context.request.headers)
        context.body = parse_body(context.request)
        plan = _routed(context, NO_ROUTE_FOR_MODEL)
        await state.runner.admit(context)
        dispatch = self._dispatch(context, plan, finish)
        if state.cache is None:
            return await dispatch.run()
        return await state.cache.serve(context, dispatch.run, finish)

    async def _serve_stored_response(self, context: RequestContext, finish: Finish) -> Response:
        """`GET` or `DELETE /v1/responses/{id}`: routed by path like any request (no body, no model), never cached."""
        context.principal = await context.state.identity.authenticate(context.request.headers)
        plan = _routed(context, NO_ROUTE_FOR_PATH)
        await context.state.runner.admit(context)
        return await self._dispatch(context, plan, finish).run()

    def _dispatch(self, context: RequestContext, plan: Plan, finish: Finish) -> Dispatch:
        """The dispatch of an admitted request along its route's `plan`."""
        runtime = self.runtime
        return _dispatch_class(context)(runtime.pool, runtime.metrics, context, plan, finish, outliers=runtime.outliers)

    def finish(self, context: RequestContext) -> None:
        """Account for a served request once its last byte is known."""
        metrics = self.runtime.metrics
        elapsed = time.perf_counter() - context.started
        route = context.route or ""
        metrics.in_flight.dec()
        self.runtime.in_flight.leave(context.state)
        metrics.child(metrics.requests, route, str(context.status)).inc()
        metrics.child(metrics.latency, route).observe(elapsed)
        metrics.overhead.observe(max(elapsed - context.upstream_seconds, 0.0))
        if context.usage is not None and context.destination is not None:
            metrics.child(metrics.tokens, context.destination, "input").inc(context.usage.input_tokens)
            metrics.child(metrics.tokens, context.destination, "output").inc(context.usage.output_tokens)
        context.state.runner.settle(context)

    def _error(self, protocol: Protocol, error: GatewayError, request: Request | None = None) -> Response:
        metrics = self.runtime.metrics
        metrics.child(metrics.errors, error.code.value).inc()
        rpc_id = jsonrpc_id(request.body) if protocol is Protocol.JSONRPC and request is not None else None
        return error_response(protocol, error, rpc_id)

    async def _other(self, request: Request) -> Response:
        """Paths outside the model operations."""
        if request.path == "/v1/models":
            if request.method != "GET":
                return self._error(Protocol.VENDOR_A, GatewayError(ErrorCode.METHOD_NOT_ALLOWED, "use GET"))
            return await self._models(request)
        if response_id_of(request.path) is not None:
            if request.method not in ITEM_METHODS:
                return self._error(Protocol.VENDOR_A, GatewayError(ErrorCode.METHOD_NOT_ALLOWED, "use GET or DELETE"))
            context = RequestContext(
                request=request, operation=Operation.RESPONSES, protocol=Protocol.VENDOR_A, state=self.runtime.state
            )
            return await self._run(context, self._serve_stored_response)
        if _is_agent_session_path(request.path):
            return self._error(
                Protocol.VENDOR_A, GatewayError(ErrorCode.NOT_IMPLEMENTED, "agent sessions are not implemented")
            )
        if request.path in MCP_PATHS:
            return await self._mcp_request(request)
        if request.path.startswith(NATIVE_PREFIX):
            context = RequestContext(
                request=request, operation=Operation.NATIVE, protocol=Protocol.VENDOR_A, state=self.runtime.state
            )
            return await self._run(context, self.native.serve)
        return self._error(Protocol.VENDOR_A, GatewayError(ErrorCode.NOT_FOUND, f"no endpoint {request.path}"))

    async def _mcp_request(self, request: Request) -> Response:
        """MCP traffic; the deprecated `/mcp` alias says so in a `Deprecation` header."""
        if request.path == SSE_PATH:
            forwarded = await self.mcp_sse.forwarded(request)
            if forwarded is not None:
                return forwarded  # served and accounted for by the worker holding the stream
        context = RequestContext(
            request=request, operation=Operation.MCP, protocol=Protocol.JSONRPC, state=self.runtime.state
        )
        serve = self.mcp_sse.serve if request.path == SSE_PATH else self.mcp.serve
        response = await self._run(context, serve)
        if request.path == DEPRECATED_MCP_PATH:
            response.headers = [*response.headers, (b"deprecation", b"true")]
        return response

    async def _models(self, request: Request) -> Response:
        try:
            await self.runtime.state.identity.authenticate(request.headers)
        except GatewayError as error:
            return self._error(Protocol.VENDOR_A, error)
        data = [
            {"id": model, "object": "model", "created": 0, "owned_by": "gateway"} for model in self.runtime.state.models
        ]
        return Response(200, JSON_CONTENT, orjson.dumps({"object": "list", "data": data}))
