"""The stage runner: a snapshot's governance stages around one request, in two halves. `admit` runs every
stage's admission before the first upstream call; `settle` prices the finished request and lets every stage
account for it, once, whatever the outcome."""

from __future__ import annotations

import logging

from gatewayproxy.context import RequestContext
from gatewayproxy.errors import GatewayError
from gatewayproxy.pipeline.pricing import Pricer
from gatewayproxy.pipeline.stages import Stage

logger = logging.getLogger("gatewayproxy.data")


class StageRunner:
    """Admission and settlement of one snapshot's stages."""

    def __init__(self, stages: list[Stage], pricer: Pricer) -> None:
        self.stages = stages
        self.pricer = pricer

    async def admit(self, context: RequestContext) -> None:
        """Run every stage's admission in order; the first refusal wins (and is named in `refused_by`)."""
        for stage in self.stages:
            try:
                await stage.admit(context)
            except GatewayError:
                context.refused_by = stage.name
                raise

    def settle(self, context: RequestContext) -> None:
        """Price the finished request, then let every stage account for it; a failing stage is logged and the
        others still settle."""
        context.cost_usd = self.pricer.cost(context.destination, context.model, context.usage)
        for stage in self.stages:
            try:
                stage.settle(context)
            except Exception:
                logger.exception("stage %s failed to settle request %s", stage.name, context.request.request_id)
