"""Prices: what a served request cost, from destination pricing and the configured cost model."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gatewayproxy.config.models import GatewayConfig
from gatewayproxy.errors import ErrorCode, GatewayError
from gatewayproxy.pipeline.context import Usage
from gatewayproxy.vaults.resolvers import Fetch

if TYPE_CHECKING:
    from gatewayproxy.state import GatewayState


class Pricer:
    """Turns a destination, a model and token counts into USD; `None` when the request has no price."""

    def __init__(self, config: GatewayConfig, fetch: Fetch) -> None:
        self.config = config

    def cost(self, destination: str | None, model: str | None, usage: Usage | None) -> float | None:
        """The USD cost of one request's usage at `destination` (unpriced: `None`)."""
        return None


async def resolve_price(state: GatewayState, query: dict[str, str]) -> dict[str, Any]:
    """`GET /admin/v1/pricing/resolve`: the price of `provider`/`model` (optionally at `destination`)."""
    config = state.config
    if config.plugins.cost_model is None:
        raise GatewayError(ErrorCode.PRICING_UNAVAILABLE, "no cost model is configured")
    provider, model = query.get("provider"), query.get("model")
    if not provider or not model:
        raise GatewayError(ErrorCode.INVALID_REQUEST, "`provider` and `model` are required")
    for name, destination in config.destinations.items():
        if query.get("destination", name) != name or destination.kind != provider or destination.pricing is None:
            continue
        pricing = destination.pricing.model_dump(exclude_none=True)
        return {"provider": provider, "model": model, "destination": name, "pricing": pricing}
    raise GatewayError(ErrorCode.NOT_FOUND, f"no price for {provider}/{model}")
