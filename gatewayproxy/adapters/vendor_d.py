"""The `vendor_d` adapter: cloud vendor D's model runtime (messages-shaped bodies), SigV4-signed by botocore.

The vault secret has scheme `aws_sigv4` with `access_key_id`, `secret_access_key` and optional
`session_token`. Streams arrive in the vendor's binary event-stream framing and are decoded to events.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any, ClassVar
from urllib.parse import quote

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.eventstream import EventStreamBuffer

from gatewayproxy.adapters.base import Adapter, Shape, StreamDecoder, UpstreamCall
from gatewayproxy.context import Operation
from gatewayproxy.http.sse import SseEvent
from gatewayproxy.vaults.resolvers import Secret

BODY_VERSION = "bedrock-2023-05-31"
SERVICE = "bedrock"


def sigv4_credentials(secret: Secret) -> Credentials:
    """botocore credentials from an `aws_sigv4` secret."""
    access_key = secret.fields.get("access_key_id") or secret.token
    return Credentials(
        str(access_key), str(secret.fields.get("secret_access_key", "")), secret.fields.get("session_token")
    )


class EventStreamDecoder:
    """Vendor D's binary event stream to events named like the messages stream."""

    def __init__(self) -> None:
        self._buffer = EventStreamBuffer()

    def feed(self, chunk: bytes) -> list[SseEvent]:
        """Events completed by `chunk`."""
        self._buffer.add_data(chunk)
        return [self._event(message.headers, message.payload) for message in self._buffer]

    @staticmethod
    def _event(headers: dict[str, Any], payload: bytes) -> SseEvent:
        if headers.get(":message-type") != "event":
            kind = str(headers.get(":exception-type") or headers.get(":error-code") or "api_error")
            message = json.loads(payload or b"{}").get("message", kind)
            return SseEvent("error", json.dumps({"type": "error", "error": {"type": kind, "message": message}}))
        inner = base64.b64decode(json.loads(payload)["bytes"]).decode()
        return SseEvent(json.loads(inner).get("type", ""), inner)


class VendorDAdapter(Adapter):
    """Messages-shaped models behind SigV4; the model id goes in the path."""

    shape = Shape.MESSAGES
    operations: ClassVar[frozenset[Operation]] = frozenset({Operation.MESSAGES})

    @property
    def region(self) -> str:
        """The service region (default `us-east-1`)."""
        return self.destination.region or "us-east-1"

    def base_url(self) -> str:
        return (self.destination.base_url or f"https://bedrock-runtime.{self.region}.amazonaws.com").rstrip("/")

    async def build(
        self, operation: Operation, body: dict[str, Any], stream: bool, scope: Mapping[str, str]
    ) -> UpstreamCall:
        payload = {key: value for key, value in body.items() if key not in ("model", "stream")}
        payload.setdefault("anthropic_version", BODY_VERSION)
        action = "invoke-with-response-stream" if stream else "invoke"
        path = f"{self.origin.base_path}/model/{quote(str(body.get('model', '')), safe='')}/{action}"
        data = self.encode(payload)
        secret = await self.secret(scope)
        request = AWSRequest(
            method="POST",
            url=f"{self.base_url()}{path.removeprefix(self.origin.base_path)}",
            data=data,
            headers={"content-type": "application/json"},
        )
        SigV4Auth(sigv4_credentials(secret), SERVICE, self.region).add_auth(request)
        headers = [(name.lower().encode(), str(value).encode()) for name, value in request.headers.items()]
        return UpstreamCall(self.origin, b"POST", path.encode(), headers, data)

    def stream_decoder(self) -> StreamDecoder:
        return EventStreamDecoder()
