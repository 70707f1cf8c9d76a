"""The request context that every stage reads and extends, and the types and constants the layers above share:
operations, usage, the principal, a route's plan, the request's trace context, the MCP method names the stages
look at."""

from __future__ import annotations

import enum
import random
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, NamedTuple, TypeVar

from gatewayproxy.config.models import Target
from gatewayproxy.errors import Protocol
from gatewayproxy.http.connection import Request

TOOLS_CALL = "tools/call"  # the MCP method whose arguments and result the stages judge
Snapshot = TypeVar("Snapshot")
# version-traceid-parentid-flags, lower-case hex; all-zero ids are invalid (W3C Trace Context, section 3.2).
TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
ZERO_TRACE, ZERO_SPAN = "0" * 32, "0" * 16


class Operation(enum.Enum):
    """What a data-plane request asks for; decides the body shape and which destinations can serve it."""

    CHAT = "chat"
    EMBEDDINGS = "embeddings"
    MESSAGES = "messages"
    RESPONSES = "responses"
    MCP = "mcp"
    NATIVE = "native"


@dataclass(frozen=True)
class Usage:
    """Token counts of one served request (`cache_write_1h_tokens` are the part of `cache_write_tokens` written
    to the one-hour cache)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    cache_write_1h_tokens: int = 0


@dataclass(frozen=True)
class Principal:
    """An authenticated caller and its verified scope."""

    id: str
    scope: Mapping[str, str] = field(default_factory=dict)
    validator: str = ""
    header_dims: frozenset[str] = frozenset()  # dimensions of `scope` taken from trusted headers, not verified


ANONYMOUS = Principal(id="anonymous")


class TraceContext(NamedTuple):
    """A request's W3C trace context, fixed when the request starts: the caller's trace id (or a new one), the
    gateway span's own id, the caller's span id as its parent ("" when the request starts a trace) and the flags."""

    trace_id: str
    span_id: str
    parent_id: str
    flags: str

    @property
    def traceparent(self) -> str:
        """The `traceparent` a call made within the gateway span carries (the span as the callee's parent)."""
        return f"00-{self.trace_id}-{self.span_id}-{self.flags}"


def continue_trace(headers: Mapping[str, str]) -> TraceContext:
    """A new span continuing the client's `traceparent`, or a new sampled trace when it sent none (or a bad one)."""
    found = TRACEPARENT.match(headers.get("traceparent", "").strip())
    if found and found.group(1) != ZERO_TRACE and found.group(2) != ZERO_SPAN:
        return TraceContext(found.group(1), _new_id(64), found.group(2), found.group(3))
    return TraceContext(_new_id(128), _new_id(64), "", "01")


def _new_id(bits: int) -> str:
    """A random, non-zero trace or span id in hex (the `random` module, as OpenTelemetry's id generator: ids
    need to be unique, not secret)."""
    return f"{random.getrandbits(bits) or 1:0{bits // 4}x}"


@dataclass(frozen=True)
class Attempts:
    """How often one target may be called and which failures are worth another call."""

    max_attempts: int
    backoff_ms: int
    triggers: frozenset[str]
    timeout_seconds: float | None


@dataclass(frozen=True)
class Plan:
    """The targets to try, in order, and the attempt budget of each."""

    route: str
    targets: tuple[Target, ...]
    attempts: Attempts


@dataclass
class RequestContext(Generic[Snapshot]):
    """Everything known about one data-plane request as it moves through the stages.

    `state` is the config snapshot the request started on (a `gatewayproxy.state.GatewayState`, built floors
    above this module, hence the type parameter); it finishes on it, whatever is swapped in meanwhile. `notes` is
    where a stage keeps what it must find again in `settle` (a reservation, a verdict), keyed by the stage's name;
    `response_headers` are added to the response the client gets. `error_code` is the code of an error the gateway
    answered itself; `refused_by` names the stage whose `admit` refused the request. `trace` is the request's
    trace context (from its `traceparent`), the ids of the gateway's span whether or not one is exported.
    """

    request: Request
    operation: Operation
    protocol: Protocol
    state: Snapshot
    body: dict[str, Any] = field(default_factory=dict)
    principal: Principal = ANONYMOUS
    started: float = field(default_factory=time.perf_counter)
    route: str | None = None
    destination: str | None = None
    attempts: int = 0
    usage: Usage | None = None
    status: int = 0
    upstream_seconds: float = 0.0
    plan: Plan | None = None
    cost_usd: float | None = None
    output_text: str = ""
    output_complete: bool = False  # `output_text` holds the whole response (last `inspect_output` call)
    response_headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    notes: dict[str, Any] = field(default_factory=dict)
    error_code: str | None = None
    refused_by: str | None = None
    partial: bool = False  # a stream that ended early: `usage` counts what was received, `status` why it ended
    trace: TraceContext = field(init=False)

    def __post_init__(self) -> None:
        self.trace = continue_trace(self.request.headers)

    @property
    def model(self) -> str | None:
        """The model the client asked for."""
        model = self.body.get("model")
        return model if isinstance(model, str) else None

    @property
    def stream(self) -> bool:
        """Whether the client asked for a streamed response."""
        return self.body.get("stream") is True

    @property
    def scope(self) -> dict[str, str]:
        """The principal's scope (verified, plus trusted headers)."""
        return dict(self.principal.scope)
