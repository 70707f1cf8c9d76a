"""The immutable snapshot the hot path reads: everything built from one validated config."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field

from gatewayproxy.adapters.base import Adapter
from gatewayproxy.adapters.registry import adapter_class
from gatewayproxy.config.loader import LoadedConfig
from gatewayproxy.config.models import MODEL_KINDS, GatewayConfig
from gatewayproxy.metrics import GatewayMetrics
from gatewayproxy.pipeline import audit, authorize, cache, guardrails, limits, policy, tracing, usage
from gatewayproxy.pipeline.cache import CacheStage
from gatewayproxy.pipeline.deps import StageDeps
from gatewayproxy.pipeline.identity import IdentityStage
from gatewayproxy.pipeline.pricing import Pricer
from gatewayproxy.pipeline.routing import Router
from gatewayproxy.pipeline.runner import StageRunner
from gatewayproxy.pipeline.stages import SharedParts, Stage
from gatewayproxy.server.inflight import InFlight
from gatewayproxy.server.outliers import Outliers
from gatewayproxy.server.upstream import UpstreamPool, fetcher
from gatewayproxy.vaults.resolvers import VaultResolver, build_vault


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


def build_stages(deps: StageDeps) -> list[Stage]:
    """The snapshot's stages in pipeline order: who may ask, policy, limits, content, then the records."""
    builders = (
        cache.build,  # first: it settles a cache hit's cost to zero before the limits and records see it
        authorize.build,
        policy.build,
        limits.build,
        guardrails.build,
        usage.build,
        audit.build,
        tracing.build,
    )
    return [stage for builder in builders for stage in builder(deps)]


@dataclass
class GatewayState:
    """One config snapshot with its built parts; swapped whole, never mutated (requests in flight on it are
    counted by the server, in `Runtime.in_flight`)."""

    loaded: LoadedConfig
    identity: IdentityStage
    router: Router
    adapters: dict[str, Adapter]
    vaults: dict[str, VaultResolver]
    models: list[str]
    pricer: Pricer
    stages: list[Stage] = field(default_factory=list)

    @property
    def config(self) -> GatewayConfig:
        """The validated config."""
        return self.loaded.config

    @functools.cached_property
    def runner(self) -> StageRunner:
        """The stages' admission and settlement around each request."""
        return StageRunner(self.stages, self.pricer)

    @functools.cached_property
    def cache(self) -> CacheStage | None:
        """The response cache (`plugins.cache`), when one is configured."""
        return next((stage for stage in self.stages if isinstance(stage, CacheStage)), None)

    @functools.cached_property
    def output_inspectors(self) -> list[Stage]:
        """The stages that look at response text; with none, responses are relayed without extracting any."""
        return [stage for stage in self.stages if type(stage).inspect_output is not Stage.inspect_output]

    async def start(self) -> None:
        """Start the stages' background work; the snapshot is about to serve."""
        self.identity.start()
        for stage in self.stages:
            await stage.start()

    async def close(self) -> None:
        """Stop the stages' background work, flushing what they queued; the snapshot has retired."""
        for stage in reversed(self.stages):
            await stage.close()
        await self.identity.close()


def build_state(loaded: LoadedConfig, pool: UpstreamPool, shared: SharedParts, metrics: GatewayMetrics) -> GatewayState:
    """Construct every part of a snapshot; raises on a config that cannot run."""
    config = loaded.config
    fetch = fetcher(pool)
    vaults = {vault.name: build_vault(vault, fetch) for vault in config.vaults}
    adapters = {
        name: adapter_class(destination.kind)(name, destination, vaults.get(destination.vault_name))
        for name, destination in config.destinations.items()
        if destination.kind in MODEL_KINDS
    }
    base_dir = os.path.dirname(os.path.abspath(loaded.source)) if loaded.source else None
    pricer = Pricer(config, fetch, base_dir)
    stages = build_stages(
        StageDeps(
            config=config, fetch=fetch, pool=pool, shared=shared, metrics=metrics, pricer=pricer, base_dir=base_dir
        )
    )
    return GatewayState(
        loaded=loaded,
        identity=IdentityStage(config.identity, config.spend, fetch),
        router=Router(config.routes),
        adapters=adapters,
        vaults=vaults,
        models=served_models(config),
        pricer=pricer,
        stages=stages,
    )


@dataclass
class Runtime:
    """Process-wide parts that outlive snapshots: the upstream pool, the metrics, the shared stage parts,
    the current state, and the runtime counts (requests in flight, destinations' outlier health)."""

    state: GatewayState
    pool: UpstreamPool
    metrics: GatewayMetrics
    shared: SharedParts
    ready: bool = False
    file_backed: bool = True
    in_flight: InFlight = field(default_factory=InFlight)  # requests per snapshot; a swapped-out one retires at 0
    outliers: Outliers = field(default_factory=Outliers)  # destinations' health, kept across snapshots
