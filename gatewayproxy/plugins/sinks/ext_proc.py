"""The `ext_proc` audit sink: each batch POSTed to an external processor within `timeout_ms`. Its
`failure_mode` (`deny` by default) decides whether the audit stage refuses traffic while it fails."""

from __future__ import annotations

from pydantic import Field

from gatewayproxy.config.models import FilePath
from gatewayproxy.plugins.sinks.base import SinkOptions
from gatewayproxy.plugins.sinks.post import PostSink
from gatewayproxy.server.upstream import UpstreamPool


class ExtProcOptions(SinkOptions):
    """`url`: where batches go; `bearer_token_file`: optional credential; `timeout_ms`: one POST's deadline."""

    url: str
    bearer_token_file: FilePath | None = None
    timeout_ms: int = Field(default=3000, gt=0)


class ExtProcSink(PostSink):
    """An external audit processor; it must answer 2xx with a JSON body (e.g. `{}`)."""

    def __init__(self, pool: UpstreamPool, options: ExtProcOptions) -> None:
        super().__init__(pool, options.url, options.timeout_ms, options.bearer_token_file)
