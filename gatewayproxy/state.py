"""The immutable snapshot the hot path reads: everything built from one validated config."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from gatewayproxy.adapters.base import Adapter
from gatewayproxy.adapters.registry import adapter_class
from gatewayproxy.config.loader import LoadedConfig
from gatewayproxy.config.models import MODEL_KINDS, GatewayConfig
from gatewayproxy.metrics import GatewayMetrics
from gatewayproxy.pipeline.context import RequestContext
from gatewayproxy.pipeline.identity import IdentityStage
from gatewayproxy.pipeline.routing import Router
from gatewayproxy.server.upstream import UpstreamPool, fetcher
from gatewayproxy.vaults.resolvers import VaultResolver, build_vault


class Stage(Protocol):
    """A governance stage (rate limits, spend, guardrails, authorizers, usage sinks) run in order.

    `before_upstream` may raise a `GatewayError` to refuse the request; `after_response` sees the
    finished context (status, usage). The core ships no stage; the governance issue adds them.
    """

    async def before_upstream(self, context: RequestContext) -> None:
        """Admit or refuse the request."""
        ...

    def after_response(self, context: RequestContext) -> None:
        """Account for the served request (must not block)."""
        ...


def served_models(config: GatewayConfig) -> list[str]:
    """Concrete model ids the routes can serve: wildcard-free model globs and `model_map` keys."""
    models: dict[str, None] = {}
    for route in config.routes:
        if route.match.model and "*" not in route.match.model:
            models[route.match.model] = None
        for target in route.strategy.targets:
            destination = config.destinations.get(target.destination)
            if destination is not None:
                models.update(dict.fromkeys(destination.model_map))
    return list(models)


@dataclass
class GatewayState:
    """One config snapshot with its built parts; swapped whole, never mutated."""

    loaded: LoadedConfig
    identity: IdentityStage
    router: Router
    adapters: dict[str, Adapter]
    vaults: dict[str, VaultResolver]
    models: list[str]
    stages: list[Stage] = field(default_factory=list)

    @property
    def config(self) -> GatewayConfig:
        """The validated config."""
        return self.loaded.config


def build_state(loaded: LoadedConfig, pool: UpstreamPool) -> GatewayState:
    """Construct every part of a snapshot; raises on a config that cannot run."""
    config = loaded.config
    fetch = fetcher(pool)
    vaults = {vault.name: build_vault(vault, fetch) for vault in config.vaults}
    adapters = {name: adapter_class(destination.kind)(name, destination, vaults[destination.credentials.vault])
                for name, destination in config.destinations.items() if destination.kind in MODEL_KINDS}
    return GatewayState(loaded=loaded, identity=IdentityStage(config.identity, config.spend, fetch),
                        router=Router(config.routes), adapters=adapters, vaults=vaults,
                        models=served_models(config))


@dataclass
class Runtime:
    """Process-wide parts that outlive snapshots: the upstream pool, the metrics, the current state."""

    state: GatewayState
    pool: UpstreamPool
    metrics: GatewayMetrics
    ready: bool = False
    file_backed: bool = True
