"""The `vendor_b` adapter: the messages API with `x-api-key` and `anthropic-version`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from gatewayproxy.adapters.base import JSON_HEADERS, SSE_HEADERS, Adapter, Shape, UpstreamCall
from gatewayproxy.context import Operation

API_VERSION = b"2023-06-01"


class VendorBAdapter(Adapter):
    """Vendor B's API: `base_url` is the host root and `/v1/messages` is appended."""

    shape = Shape.MESSAGES
    operations: ClassVar[frozenset[Operation]] = frozenset({Operation.MESSAGES})
    default_base_url = "https://api.anthropic.com"

    async def build(
        self, operation: Operation, body: dict[str, Any], stream: bool, scope: Mapping[str, str]
    ) -> UpstreamCall:
        secret = await self.secret(scope)
        headers = [
            *(SSE_HEADERS if stream else JSON_HEADERS),
            (b"x-api-key", secret.token.encode()),
            (b"anthropic-version", API_VERSION),
        ]
        path = (self.origin.base_path + "/v1/messages").encode()
        return UpstreamCall(self.origin, b"POST", path, headers, self.encode(body))
