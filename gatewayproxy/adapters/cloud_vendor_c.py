"""The `cloud_vendor_c` adapter: vendor A models hosted by cloud vendor C, with an `api-key` header.

With `deployment` or `api_version` set, paths take the deployment form
`{base_url}/openai/deployments/{deployment}/{operation}?api-version={api_version}`, the deployment
defaulting to the (mapped) model; otherwise the operation path is appended to `base_url`.

The responses API is not per deployment on cloud vendor C (the deployment is the body's `model`). Its v1 API, the
form the provider documents as current, is `POST {endpoint}/openai/v1/responses` with no `api-version`: that is the
plain form with `base_url: {endpoint}/openai/v1`. A destination configured in the deployment form (its `base_url`
the resource endpoint) gets the dated form the provider documents beside it,
`{base_url}/openai/responses?api-version={api_version}`. Stored responses are read and deleted at
`.../responses/{id}` in the same form.
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

    operations: ClassVar[frozenset[Operation]] = frozenset({Operation.CHAT, Operation.EMBEDDINGS, Operation.RESPONSES})

    @property
    def deployment_form(self) -> bool:
        """Whether paths take the deployment form (`deployment` or `api_version` configured)."""
        return self.destination.deployment is not None or self.destination.api_version is not None

    def _api_version_query(self) -> str:
        version = self.destination.api_version
        return "api-version=" + quote(version, safe="") if version else ""

    def deployment_path(self, operation: Operation, model: Any) -> bytes:
        """The request target in the deployment form, or the plain form without deployment settings."""
        destination = self.destination
        if not self.deployment_form:
            return self.path(operation)
        if operation is Operation.RESPONSES:
            return f"{self.origin.base_path}/openai/responses".encode() + self._query_suffix()
        deployment = quote(str(destination.deployment or model or ""), safe="")
        path = f"{self.origin.base_path}/openai/deployments/{deployment}{OPERATION_PATHS[operation]}"
        return path.encode() + self._query_suffix()

    def _query_suffix(self, query: str = "") -> bytes:
        joined = "&".join(part for part in (self._api_version_query(), query) if part)
        return ("?" + joined).encode() if joined else b""

    def response_path(self, response_id: str, query: str) -> bytes:
        """`{base_url}/responses/{id}` (v1 API), or `{base_url}/openai/responses/{id}?api-version=...`."""
        if not self.deployment_form:
            return super().response_path(response_id, query)
        return f"{self.origin.base_path}/openai/responses/{response_id}".encode() + self._query_suffix(query)

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
