"""Usage records (one per served request) and the usage sinks they are queued to, off the request path."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gatewayproxy.errors import ErrorCode, GatewayError
from gatewayproxy.pipeline.stages import Stage, StageDeps

if TYPE_CHECKING:
    from gatewayproxy.state import GatewayState


def build(deps: StageDeps) -> list[Stage]:
    """This family's stages for a snapshot (none until it is built)."""
    return []


async def query_usage(state: GatewayState, query: dict[str, str]) -> dict[str, Any]:
    """`GET /admin/v1/spend/usage`: the relational ledger, filtered and grouped."""
    raise GatewayError(ErrorCode.USAGE_QUERY_UNAVAILABLE, "no queryable relational usage sink is configured")
