"""The request context that every stage reads and extends, and the operations of the data plane."""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gatewayproxy.errors import Protocol
from gatewayproxy.http.connection import Request
from gatewayproxy.pipeline.identity import ANONYMOUS, Principal

if TYPE_CHECKING:
    from gatewayproxy.pipeline.routing import Plan
    from gatewayproxy.state import GatewayState


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


@dataclass
class RequestContext:
    """Everything known about one data-plane request as it moves through the stages.

    `state` is the config snapshot the request started on; it finishes on it, whatever is swapped in
    meanwhile. `notes` is where a stage keeps what it must find again in `settle` (a reservation, a verdict), keyed
    by the stage's name; `response_headers` are added to the response the client gets. `error_code` is the code
    of an error the gateway answered itself; `refused_by` names the stage whose `admit` refused the request.
    """

    request: Request
    operation: Operation
    protocol: Protocol
    state: GatewayState
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
