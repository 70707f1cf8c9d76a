"""The `vendor_a` adapter: chat completions, embeddings and responses, with a bearer credential."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from gatewayproxy.adapters.base import JSON_HEADERS, SSE_HEADERS, Adapter, UpstreamCall
from gatewayproxy.context import Operation

OPERATION_PATHS = {
    Operation.CHAT: "/chat/completions",
    Operation.EMBEDDINGS: "/embeddings",
    Operation.RESPONSES: "/responses",
}


class VendorAAdapter(Adapter):
    """Vendor A's API: `base_url` includes the version segment and the operation path is appended."""

    operations: ClassVar[frozenset[Operation]] = frozenset(OPERATION_PATHS)
    default_base_url = "https://api.openai.com/v1"

    def path(self, operation: Operation) -> bytes:
        """The request target of an operation."""
        return (self.origin.base_path + OPERATION_PATHS[operation]).encode()

    async def credential_headers(self, scope: Mapping[str, str]) -> list[tuple[bytes, bytes]]:
        """Vendor A shapes take `Authorization: Bearer`."""
        secret = await self.secret(scope)
        return [(b"authorization", b"Bearer " + secret.token.encode())]

    async def build(
        self, operation: Operation, body: dict[str, Any], stream: bool, scope: Mapping[str, str]
    ) -> UpstreamCall:
        headers = [*(SSE_HEADERS if stream else JSON_HEADERS), *await self.credential_headers(scope)]
        return UpstreamCall(self.origin, b"POST", self.path(operation), headers, self.encode(body))

    def response_path(self, response_id: str, query: str) -> bytes:
        """The request target of one stored response (`GET`/`DELETE /responses/{id}`), the client's query kept."""
        return (self.origin.base_path + "/responses/" + response_id + (f"?{query}" if query else "")).encode()

    async def build_response_call(
        self, method: str, response_id: str, query: str, scope: Mapping[str, str]
    ) -> UpstreamCall:
        """The upstream call that reads or deletes a stored response."""
        headers = [(b"accept", b"application/json"), *await self.credential_headers(scope)]
        return UpstreamCall(self.origin, method.encode(), self.response_path(response_id, query), headers, b"")
