"""The `vendor_e` adapter: cloud vendor E's model service (messages-shaped publisher models) with OAuth.

The vault secret is either an access token (`bearer`) or a google-auth credentials document (service
account, authorized user, ...), whose tokens google-auth refreshes off the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, ClassVar
from urllib.parse import quote

import google.auth
import google.auth.transport.requests

from gatewayproxy.adapters.base import JSON_HEADERS, SSE_HEADERS, Adapter, Shape, UpstreamCall
from gatewayproxy.context import Operation
from gatewayproxy.vaults.resolvers import Secret

BODY_VERSION = "vertex-2023-10-16"
OAUTH_SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]


class OAuthTokens:
    """Access tokens from google-auth credentials, refreshed when expired."""

    def __init__(self) -> None:
        self._credentials: dict[str, Any] = {}
        self._lock = asyncio.Lock()

    async def token(self, secret: Secret) -> str:
        """A valid access token for the secret."""
        if "type" not in secret.fields:
            return secret.token
        key = str(secret.fields.get("client_email") or secret.fields.get("client_id") or secret.fields["type"])
        async with self._lock:
            credentials = self._credentials.get(key)
            if credentials is None:
                credentials, _ = google.auth.load_credentials_from_dict(dict(secret.fields), scopes=OAUTH_SCOPES)
                self._credentials[key] = credentials
            if not credentials.valid:
                await asyncio.to_thread(credentials.refresh, google.auth.transport.requests.Request())
            return str(credentials.token)


class VendorEAdapter(Adapter):
    """Messages-shaped publisher models addressed by project, location and model."""

    shape = Shape.MESSAGES
    operations: ClassVar[frozenset[Operation]] = frozenset({Operation.MESSAGES})

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._tokens = OAuthTokens()

    def base_url(self) -> str:
        location = self.destination.location
        host = "aiplatform.googleapis.com" if location == "global" else f"{location}-aiplatform.googleapis.com"
        return (self.destination.base_url or f"https://{host}/v1").rstrip("/")

    async def build(
        self, operation: Operation, body: dict[str, Any], stream: bool, scope: Mapping[str, str]
    ) -> UpstreamCall:
        payload = {key: value for key, value in body.items() if key != "model"}
        payload.setdefault("anthropic_version", BODY_VERSION)
        destination = self.destination
        action = "streamRawPredict" if stream else "rawPredict"
        path = (
            f"{self.origin.base_path}/projects/{destination.project}/locations/{destination.location}"
            f"/publishers/anthropic/models/{quote(str(body.get('model', '')), safe='')}:{action}"
        )
        token = await self._tokens.token(await self.secret(scope))
        headers = [*(SSE_HEADERS if stream else JSON_HEADERS), (b"authorization", b"Bearer " + token.encode())]
        return UpstreamCall(self.origin, b"POST", path.encode(), headers, self.encode(payload))
