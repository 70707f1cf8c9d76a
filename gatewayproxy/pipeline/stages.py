"""The governance stage contract and the process-wide parts stages share across snapshots.

A snapshot's stages run in the order `gatewayproxy.state.build_stages` gives: `admit` after identity and routing,
before the first upstream call; `inspect_output` on the response text; `settle` once per request, whatever its
outcome.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from gatewayproxy.context import RequestContext

Part = TypeVar("Part")


class Stage:
    """A governance stage; every hook is a no-op until a stage overrides it."""

    name = "stage"

    async def start(self) -> None:
        """Start background work (sink writers, refreshers) once the snapshot goes live."""

    async def close(self) -> None:
        """Stop background work and flush what is queued; called when the snapshot retires."""

    async def admit(self, context: RequestContext) -> None:
        """Admit or refuse the request (raise `GatewayError`); runs after routing, before any upstream call.

        A stage that reserves something here releases or settles it in `settle`, which runs even when a
        later stage refused the request.
        """

    async def inspect_output(self, context: RequestContext, text: str) -> None:
        """See the response's text: once whole for a plain response, delta by delta for a stream
        (`context.output_text` holds everything so far); raise `GatewayError` to block it."""

    def settle(self, context: RequestContext) -> None:
        """Account for the finished request (status, usage, `cost_usd` known); must not block."""


class SharedParts:
    """Parts that outlive a snapshot swap (local limiter buckets, in-memory state, Redis clients)."""

    def __init__(self) -> None:
        self._parts: dict[str, Any] = {}

    def get(self, key: str, factory: Callable[[], Part]) -> Part:
        """The part under `key`, made by `factory` the first time it is asked for."""
        if key not in self._parts:
            self._parts[key] = factory()
        part: Part = self._parts[key]
        return part
