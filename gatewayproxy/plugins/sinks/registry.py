"""The `registry` usage sink: model-usage deltas to a registry's ingestion endpoint (`POST
{base_url}/internal/v1/usage`, idempotent on request id); MCP records are skipped."""

from __future__ import annotations

from pydantic import Field

from gatewayproxy.config.models import FilePath
from gatewayproxy.plugins.sinks.base import Record, SinkOptions
from gatewayproxy.plugins.sinks.post import PostSink
from gatewayproxy.server.upstream import UpstreamPool

REGISTRY_ENDPOINT = "/internal/v1/usage"


class RegistryOptions(SinkOptions):
    """`base_url`: the registry's internal-listener root; `bearer_token_file`: its service token."""

    base_url: str
    bearer_token_file: FilePath
    endpoint: str = REGISTRY_ENDPOINT
    timeout_ms: int = Field(default=5000, gt=0)


class RegistrySink(PostSink):
    """The registry stores each request id once, so a batch replayed from the spool is harmless."""

    def __init__(self, pool: UpstreamPool, options: RegistryOptions) -> None:
        super().__init__(
            pool, options.base_url.rstrip("/") + options.endpoint, options.timeout_ms, options.bearer_token_file
        )

    def accepts(self, record: Record) -> bool:
        return record.get("kind") != "mcp"
