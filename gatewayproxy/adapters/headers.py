"""Headers an upstream call carries besides the adapter's own: client headers named by the destination's
`forward_headers` (by default the beta-feature and API-version headers of messages-shaped targets), the
request's `x-request-id`, and a W3C `traceparent` continuing the client's trace with a new span."""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping

from gatewayproxy.adapters.base import Adapter, Shape, UpstreamCall

MESSAGES_DEFAULT = ("anthropic-beta", "anthropic-version")
# version-traceid-parentid-flags, lower-case hex; all-zero ids are invalid (W3C Trace Context, section 3.2).
TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
ZERO_TRACE, ZERO_SPAN = "0" * 32, "0" * 16


def forwarded_names(adapter: Adapter) -> tuple[str, ...]:
    """The client header names this destination passes through (lower-case)."""
    configured = adapter.destination.forward_headers
    if configured is None:
        return MESSAGES_DEFAULT if adapter.shape is Shape.MESSAGES else ()
    return tuple(name.lower() for name in configured)


def traceparent(client_headers: Mapping[str, str]) -> bytes:
    """The client's trace with a new span id, or a new sampled trace when the client sent none (or a bad one)."""
    found = TRACEPARENT.match(client_headers.get("traceparent", "").strip())
    if found and found.group(1) != ZERO_TRACE and found.group(2) != ZERO_SPAN:
        trace_id, flags = found.group(1), found.group(3)
    else:
        trace_id, flags = secrets.token_hex(16), "01"
    return f"00-{trace_id}-{secrets.token_hex(8)}-{flags}".encode()


def with_request_headers(
    call: UpstreamCall, adapter: Adapter, client_headers: Mapping[str, str], request_id: str
) -> UpstreamCall:
    """`call` with the forwarded client headers (replacing the adapter's value of the same name), the request id
    and the trace context."""
    extra: list[tuple[bytes, bytes]] = []
    for name in forwarded_names(adapter):
        value = client_headers.get(name)
        if value is not None:
            extra.append((name.encode(), value.encode()))
    if request_id:
        extra.append((b"x-request-id", request_id.encode()))
    extra.append((b"traceparent", traceparent(client_headers)))
    replaced = {name for name, _ in extra}
    headers = [(name, value) for name, value in call.headers if name not in replaced] + extra
    return UpstreamCall(call.origin, call.method, call.path, headers, call.body)
