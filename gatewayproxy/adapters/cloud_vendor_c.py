"""The `cloud_vendor_c` adapter: vendor A models hosted by cloud vendor C, with an `api-key` header.

With `deployment` or `api_version` set, paths take the deployment form
`{base_url}/openai/deployments/{deployment}/{operation}?api-version={api_version}`, the deployment
defaulting to the (mapped) model; otherwise the operation path is appended to `base_url`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar
from urllib.parse import quote

from gatewayproxy.adapters.base import JSON_HEADERS, SSE_HEADERS, UpstreamCall
from gatewayproxy.adapters.vendor_a import OPERATION_PATHS, VendorAAdapter
from gatewayproxy.context import Operation


class CloudVendorCAdapter(VendorAAdapter):
    """Cloud vendor C's hosting of vendor A models."""

    operations: ClassVar[frozenset[Operation]] = frozenset({Operation.CHAT, Operation.EMBEDDINGS})

    def deployment_path(self, operation: Operation, model: Any) -> bytes:
        """The request target in the deployment form, or the plain form without deployment settings."""
        destination = self.destination
        if destination.deployment is None and destination.api_version is None:
            return self.path(operation)
        deployment = quote(str(destination.deployment or model or ""), safe="")
        path = f"{self.origin.base_path}/openai/deployments/{deployment}{OPERATION_PATHS[operation]}"
        if destination.api_version:
            path += "?api-version=" + quote(destination.api_version, safe="")
        return path.encode()

    async def credential_headers(self, scope: Mapping[str, str]) -> list[tuple[bytes, bytes]]:
        """Cloud vendor C takes an `api-key` header."""
        secret = await self.secret(scope)
        return [(b"api-key", secret.token.encode())]

    async def build(
        self, operation: Operation, body: dict[str, Any], stream: bool, scope: Mapping[str, str]
    ) -> UpstreamCall:
        headers = [*(SSE_HEADERS if stream else JSON_HEADERS), *await self.credential_headers(scope)]
        path = self.deployment_path(operation, body.get("model"))
        return UpstreamCall(self.origin, b"POST", path, headers, self.encode(body))
