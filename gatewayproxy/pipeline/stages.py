"""The governance stage contract, the stages over a plugin slot or sink pipelines, and the process-wide parts
stages share across snapshots.

A snapshot's stages run in the order `gatewayproxy.state.build_stages` gives: `admit` after identity and routing,
before the first upstream call; `inspect_output` on the response text; `settle` once per request, whatever its
outcome.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry

from gatewayproxy.config.models import PluginInstance
from gatewayproxy.context import RequestContext
from gatewayproxy.plugins.deps import PluginDeps
from gatewayproxy.plugins.sinks.pipeline import SinkPipeline

Part = TypeVar("Part")
Plugin = TypeVar("Plugin")
Metrics = TypeVar("Metrics")


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


def plugin_stage(
    deps: PluginDeps,
    slot: str,
    build_plugin: Callable[[PluginInstance, str, PluginDeps], Plugin],
    stage: Callable[[list[Plugin], Metrics], Stage],
    metrics: Callable[[CollectorRegistry], Metrics],
) -> list[Stage]:
    """The stage over the plugins of the list slot `plugins.<slot>`, built in config order (each told its key, to
    name in errors), with the metrics it counts on (registered once per process); none when the slot is empty."""
    instances: list[PluginInstance] = getattr(deps.config.plugins, slot)
    plugins = [build_plugin(instance, f"plugins.{slot}[{index}]", deps) for index, instance in enumerate(instances)]
    if not plugins:
        return []
    return [stage(plugins, deps.shared.get(f"{slot}.metrics", lambda: metrics(deps.metrics.registry)))]


class SinkStage(Stage):
    """A stage whose records go to sink pipelines, which start and close with its snapshot."""

    def __init__(self, pipelines: list[SinkPipeline]) -> None:
        self.pipelines = pipelines

    async def start(self) -> None:
        for pipeline in self.pipelines:
            await pipeline.start()

    async def close(self) -> None:
        await asyncio.gather(*(pipeline.close() for pipeline in self.pipelines))


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
