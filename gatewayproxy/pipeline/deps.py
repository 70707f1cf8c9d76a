"""What a stage builder may use besides the config: the process-wide parts, the snapshot's pricer, and the
model asker plugins call (it satisfies `gatewayproxy.plugins.deps.PluginDeps`)."""

from __future__ import annotations

from dataclasses import dataclass

from gatewayproxy.config.models import GatewayConfig
from gatewayproxy.metrics import GatewayMetrics
from gatewayproxy.pipeline.dispatch import ModelAsker
from gatewayproxy.pipeline.pricing import Pricer
from gatewayproxy.pipeline.stages import SharedParts
from gatewayproxy.server.upstream import UpstreamPool
from gatewayproxy.vaults.resolvers import Fetch


@dataclass(frozen=True)
class StageDeps:
    """What a stage builder may use besides the config."""

    config: GatewayConfig
    fetch: Fetch
    pool: UpstreamPool
    shared: SharedParts
    metrics: GatewayMetrics
    pricer: Pricer
    base_dir: str | None = None  # the config file's directory: plugin options' relative paths start there

    @property
    def ask_model(self) -> ModelAsker:
        """A chat call through the snapshot's own routes, ungoverned (an `llm_evaluator`'s question)."""
        return ModelAsker(self.pool, self.metrics)
