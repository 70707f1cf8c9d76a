"""What every sink kind shares: its options (batching, queue, spool) and the write contract."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from gatewayproxy.config.models import FilePath
from gatewayproxy.plugins.decisions import PluginOptions

Record = dict[str, Any]


class SinkError(Exception):
    """A batch could not be written (the sink is unreachable, refused it, or was too slow); retry it later."""


class SinkRejected(SinkError):
    """The sink judged the batch itself invalid (an HTTP 4xx other than 408 and 429): retrying cannot help, so the
    batch is dropped and counted instead of holding up every record behind it."""


class SpoolOptions(PluginOptions):
    """The local spool that keeps records while their sink is failing or the queue is full."""

    directory: FilePath
    max_events: int = Field(default=10000, gt=0)
    retry_interval_ms: int = Field(default=1000, gt=0)


class SinkOptions(PluginOptions):
    """Options every sink kind accepts: the queue in front of it, batching, deadlines and the spool."""

    spool: SpoolOptions | None = None
    queue_size: int = Field(default=10000, gt=0)
    batch_size: int = Field(default=100, gt=0)
    flush_interval_ms: int = Field(default=200, ge=0)
    write_timeout_ms: int = Field(default=5000, gt=0)
    close_timeout_ms: int = Field(default=5000, gt=0)


class Sink:
    """A destination for records; `write` gets whole batches off the request path and raises `SinkError`."""

    def accepts(self, record: Record) -> bool:
        """Whether this sink wants the record at all (the registry sink skips MCP)."""
        return True

    async def write(self, batch: list[Record]) -> None:
        """Write one batch, all or nothing as far as the caller can tell; raise `SinkError` on failure."""
        raise NotImplementedError

    async def close(self) -> None:
        """Release connections."""
