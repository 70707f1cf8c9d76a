"""What the HTTP sinks share: each batch POSTed as `{"records": [...]}`, a 2xx JSON answer meaning written."""

from __future__ import annotations

from gatewayproxy.plugins.decisions import BackendError, post_json
from gatewayproxy.plugins.sinks.base import Record, Sink, SinkError, SinkRejected
from gatewayproxy.server.upstream import UpstreamPool

RETRYABLE_CLIENT_ERRORS = frozenset({408, 429})


class PostSink(Sink):
    """POSTs each batch to one URL, with an optional bearer token reread from its file per batch."""

    def __init__(self, pool: UpstreamPool, url: str, timeout_ms: int, token_file: str | None) -> None:
        self.pool, self.url, self.timeout_seconds, self.token_file = pool, url, timeout_ms / 1000, token_file

    async def write(self, batch: list[Record]) -> None:
        try:
            await post_json(self.pool, self.url, {"records": batch}, self.timeout_seconds, self.token_file)
        except BackendError as error:
            status = error.status or 0
            if 400 <= status < 500 and status not in RETRYABLE_CLIENT_ERRORS:
                raise SinkRejected(str(error)) from None
            raise SinkError(str(error)) from None
