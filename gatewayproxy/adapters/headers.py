"""Headers an upstream call carries besides the adapter's own: client headers named by the destination's
`forward_headers` (by default the beta-feature and API-version headers of messages-shaped targets), the
request's `x-request-id`, and a W3C `traceparent` continuing the client's trace, the gateway's request span as
the callee's parent."""

from __future__ import annotations

from collections.abc import Mapping

from gatewayproxy.adapters.base import Adapter, Shape, UpstreamCall
from gatewayproxy.context import TraceContext, continue_trace

MESSAGES_DEFAULT = ("anthropic-beta", "anthropic-version")


def forwarded_names(adapter: Adapter) -> tuple[str, ...]:
    """The client header names this destination passes through (lower-case)."""
    configured = adapter.destination.forward_headers
    if configured is None:
        return MESSAGES_DEFAULT if adapter.shape is Shape.MESSAGES else ()
    return tuple(name.lower() for name in configured)


def with_request_headers(
    call: UpstreamCall,
    adapter: Adapter,
    client_headers: Mapping[str, str],
    request_id: str,
    trace: TraceContext | None = None,
) -> UpstreamCall:
    """`call` with the forwarded client headers (replacing the adapter's value of the same name), the request id
    and the trace context: `trace`'s span (the request's) as the parent, or without it a new span of the client's
    trace for this call alone."""
    extra: list[tuple[bytes, bytes]] = []
    for name in forwarded_names(adapter):
        value = client_headers.get(name)
        if value is not None:
            extra.append((name.encode(), value.encode()))
    if request_id:
        extra.append((b"x-request-id", request_id.encode()))
    extra.append((b"traceparent", (trace or continue_trace(client_headers)).traceparent.encode()))
    replaced = {name for name, _ in extra}
    headers = [(name, value) for name, value in call.headers if name not in replaced] + extra
    return UpstreamCall(call.origin, call.method, call.path, headers, call.body)
