"""What a plugin may use from the layers above it, as small protocols: the process-wide parts, the config, and
an "ask the model" callable; the pipeline's `StageDeps` satisfies `PluginDeps`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from gatewayproxy.config.models import GatewayConfig
from gatewayproxy.context import RequestContext
from gatewayproxy.metrics import GatewayMetrics
from gatewayproxy.server.upstream import UpstreamPool

Part = TypeVar("Part")
# The text of a chat completion of `body` (a chat request with its `model`) served through the snapshot of
# `context` (the request on whose behalf it asks), ungoverned; raises `BackendError` when there is no answer.
AskModel = Callable[[RequestContext, dict[str, Any]], Awaitable[str]]


class Shared(Protocol):
    """Parts that outlive a snapshot swap, made once under a key."""

    def get(self, key: str, factory: Callable[[], Part]) -> Part:
        """The part under `key`, made by `factory` the first time it is asked for."""
        ...


class PluginDeps(Protocol):
    """What a plugin builder may use besides its own instance."""

    @property
    def config(self) -> GatewayConfig:
        """The validated config of the snapshot being built."""
        ...

    @property
    def pool(self) -> UpstreamPool:
        """The process's upstream connection pool."""
        ...

    @property
    def shared(self) -> Shared:
        """The parts shared across snapshots."""
        ...

    @property
    def metrics(self) -> GatewayMetrics:
        """The process's metrics."""
        ...

    @property
    def base_dir(self) -> str | None:
        """The config file's directory: plugin options' relative paths start there."""
        ...

    @property
    def ask_model(self) -> AskModel:
        """Ask a model through the snapshot's own routes (an evaluator's call)."""
        ...
