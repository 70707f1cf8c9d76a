"""Policy guardrails (`guardrail_source`, `guardrail_state`, `guardrails_policy`): session bundles, verdicts."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gatewayproxy.errors import ErrorCode, GatewayError
from gatewayproxy.pipeline.stages import Stage, StageDeps

if TYPE_CHECKING:
    from gatewayproxy.state import GatewayState


def build(deps: StageDeps) -> list[Stage]:
    """This family's stages for a snapshot (none until it is built)."""
    return []


async def effective_bundle(state: GatewayState, query: dict[str, str]) -> dict[str, Any]:
    """`GET /admin/v1/guardrails/effective`: the bundle already cached for a verified session."""
    if state.config.guardrails_policy.mode == "off":
        raise GatewayError(ErrorCode.GUARDRAILS_UNAVAILABLE, "policy guardrails are off")
    raise GatewayError(ErrorCode.NOT_FOUND, "no policy bundle is cached for that session")
