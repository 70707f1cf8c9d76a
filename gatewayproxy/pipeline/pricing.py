"""Prices: what a served request cost, from destination pricing and the configured cost model.

A destination's `pricing` fields override the cost model's field by field; a missing rate falls back to its
nearest kin (cache rates to the input rate, the reasoning rate to the output rate, the others to zero).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gatewayproxy.adapters.base import Shape
from gatewayproxy.adapters.registry import adapter_class
from gatewayproxy.config.models import MODEL_KINDS, GatewayConfig, Pricing
from gatewayproxy.context import Usage
from gatewayproxy.errors import ErrorCode, GatewayError
from gatewayproxy.metrics import GatewayMetrics
from gatewayproxy.pipeline.stages import Stage
from gatewayproxy.plugins.cost_models import CostModel, build_cost_model
from gatewayproxy.vaults.resolvers import Fetch

PER_MILLION = 1_000_000
# Client-chosen model ids reach the memo through wildcard routes; past this size it starts over.
MEMO_LIMIT = 10_000


@dataclass(frozen=True)
class ResolvedPrice:
    """The prices of one model at one destination, and which source gave each field."""

    pricing: Pricing
    sources: dict[str, str]

    @property
    def source(self) -> str:
        """The sources of the fields, joined (`destination:<name>`, `<kind>:<name>` of a cost model)."""
        return "+".join(dict.fromkeys(self.sources.values()))


def _rate(value: float | None, fallback: float) -> float:
    return fallback if value is None else value


def usage_cost(pricing: Pricing, usage: Usage, cache_inside_input: bool) -> float:
    """USD for `usage` at `pricing`. Chat-shaped providers count cached tokens inside the input tokens;
    messages-shaped ones count them apart. Reasoning tokens are part of the output tokens, one-hour cache writes
    part of the cache writes."""
    input_rate = _rate(pricing.input_per_1m, 0.0)
    output_rate = _rate(pricing.output_per_1m, 0.0)
    write_rate = _rate(pricing.cache_write_per_1m, input_rate)
    cached = usage.cache_read_tokens + usage.cache_write_tokens if cache_inside_input else 0
    one_hour = min(usage.cache_write_1h_tokens, usage.cache_write_tokens)
    total = (
        max(usage.input_tokens - cached, 0) * input_rate
        + usage.cache_read_tokens * _rate(pricing.cache_read_per_1m, input_rate)
        + (usage.cache_write_tokens - one_hour) * write_rate
        + one_hour * _rate(pricing.cache_write_1h_per_1m, write_rate)
        + max(usage.output_tokens - usage.reasoning_tokens, 0) * output_rate
        + usage.reasoning_tokens * _rate(pricing.reasoning_output_per_1m, output_rate)
    )
    return total / PER_MILLION + (pricing.per_request_usd or 0.0)


def _overlay(found: tuple[Pricing, str] | None, destination: str | None, own: Pricing | None) -> ResolvedPrice | None:
    """The cost model's prices with the destination's own fields on top; None when nothing prices it."""
    fields: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for pricing, source in ((found or (None, "")), (own, f"destination:{destination}")):
        if pricing is None:
            continue
        for field, value in pricing.model_dump(exclude_none=True).items():
            fields[field], sources[field] = value, source
    return ResolvedPrice(Pricing(**fields), sources) if fields else None


class Pricer:
    """Turns a destination, a model and token counts into USD; `None` when the request has no price."""

    def __init__(self, config: GatewayConfig, fetch: Fetch, base_dir: str | None = None) -> None:
        self.config = config
        instance = config.plugins.cost_model
        self.cost_model: CostModel | None = (
            build_cost_model(instance, fetch, base_dir=base_dir) if instance is not None else None
        )
        self._cache_inside_input = {
            name: adapter_class(destination.kind).shape is Shape.CHAT
            for name, destination in config.destinations.items()
            if destination.kind in MODEL_KINDS
        }
        self._memo: dict[tuple[str, str], ResolvedPrice | None] = {}
        self._memo_revision = 0

    def resolve_at(self, provider: str, model: str, destination: str | None) -> ResolvedPrice | None:
        """The prices of `model` from `provider` (the upstream id first, then the client's), at `destination`
        when one is named."""
        found = None
        config = self.config.destinations.get(destination) if destination else None
        if self.cost_model is not None:
            upstream = config.model_map.get(model) if config else None
            found = (self.cost_model.lookup(provider, upstream) if upstream else None) or self.cost_model.lookup(
                provider, model
            )
        return _overlay(found, destination, config.pricing if config else None)

    def resolve(self, destination: str | None, model: str | None) -> ResolvedPrice | None:
        """The prices at a configured destination (memoized until the cost model's table changes)."""
        if destination is None or model is None or destination not in self.config.destinations:
            return None
        revision = self.cost_model.revision if self.cost_model is not None else 0
        if revision != self._memo_revision or len(self._memo) > MEMO_LIMIT:
            self._memo, self._memo_revision = {}, revision
        key = (destination, model)
        if key not in self._memo:
            self._memo[key] = self.resolve_at(self.config.destinations[destination].kind, model, destination)
        return self._memo[key]

    def estimate(self, destination: str | None, model: str | None, usage: Usage) -> float | None:
        """The USD cost `usage` would have at `destination` (None when unpriced)."""
        resolved = self.resolve(destination, model)
        if resolved is None or destination is None:
            return None
        return usage_cost(resolved.pricing, usage, self._cache_inside_input.get(destination, True))

    def cost(self, destination: str | None, model: str | None, usage: Usage | None) -> float | None:
        """The USD cost of one request's usage at `destination` (unpriced: `None`)."""
        return None if usage is None else self.estimate(destination, model, usage)

    def stages(self, metrics: GatewayMetrics | None = None) -> list[Stage]:
        """The stage that runs the cost model's background refreshes, when it has any (failed fetches counted
        in `gateway_price_refresh_failures_total` when `metrics` are given)."""
        return [] if self.cost_model is None else [CostModelRefresh(self.cost_model, metrics)]


class CostModelRefresh(Stage):
    """Starts and stops the cost model's refreshes with the snapshot."""

    name = "pricing"

    def __init__(self, cost_model: CostModel, metrics: GatewayMetrics | None = None) -> None:
        self.cost_model = cost_model
        if metrics is not None:
            cost_model.count_failures(lambda name: metrics.child(metrics.price_refresh_failures, name).inc())

    async def start(self) -> None:
        await self.cost_model.start()

    async def close(self) -> None:
        await self.cost_model.close()


def _default_destination(config: GatewayConfig, provider: str) -> str | None:
    """Without a `destination` query: the first destination of the provider that has pricing of its own."""
    return next(
        (
            name
            for name, destination in config.destinations.items()
            if destination.kind == provider and destination.pricing is not None
        ),
        None,
    )


async def resolve_price(config: GatewayConfig, pricer: Pricer, query: dict[str, str]) -> dict[str, Any]:
    """`GET /admin/v1/pricing/resolve`: the price of `provider`/`model` (optionally at `destination`) under a
    snapshot's config and pricer."""
    provider, model, destination = query.get("provider"), query.get("model"), query.get("destination")
    if not provider or not model:
        raise GatewayError(ErrorCode.INVALID_REQUEST, "`provider` and `model` are required")
    if destination is not None and destination not in config.destinations:
        raise GatewayError(ErrorCode.NOT_FOUND, f"no destination {destination!r}")
    if destination is not None and config.destinations[destination].kind != provider:
        raise GatewayError(ErrorCode.INVALID_REQUEST, f"destination {destination!r} is not of provider {provider!r}")
    own_pricing = destination is not None and config.destinations[destination].pricing is not None
    if pricer.cost_model is None and not own_pricing:
        raise GatewayError(ErrorCode.PRICING_UNAVAILABLE, "no cost model is configured")
    if destination is None:
        destination = _default_destination(config, provider)
    resolved = pricer.resolve_at(provider, model, destination)
    if resolved is None:
        raise GatewayError(ErrorCode.NOT_FOUND, f"no price for {provider}/{model}")
    return {
        "provider": provider,
        "model": model,
        "destination": destination,
        "pricing": resolved.pricing.model_dump(exclude_none=True),
        "source": resolved.source,
        "sources": resolved.sources,
    }
