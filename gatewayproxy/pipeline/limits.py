"""Rate limits and spend budgets (`rate_limits`, `spend`): admission on an estimate, settlement on real usage."""

from __future__ import annotations

from gatewayproxy.pipeline.stages import Stage, StageDeps


def build(deps: StageDeps) -> list[Stage]:
    """This family's stages for a snapshot (none until it is built)."""
    return []
