"""The `vendor_d` adapter: cloud vendor D's model runtime, every request SigV4-signed by botocore.

Models of the vendor-B family take the invoke call with messages-shaped bodies; every other model takes the
unified conversation API (`/converse`, `/converse-stream`), spoken here in the messages shape; `api: converse |
invoke` on the destination overrides that choice. Embeddings go to the vendor's embedding models through the
invoke call; a list of inputs to a model that takes one text per call is fanned out, one call per text.
Credentials: the vault's `aws_sigv4` secret (`access_key_id`, `secret_access_key`, optional `session_token`) when
the destination names one, else botocore's own credential chain (optionally `profile`). Streams arrive in the
vendor's binary event-stream framing and are decoded to messages events.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any, ClassVar
from urllib.parse import quote

import orjson
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.eventstream import EventStreamBuffer

from gatewayproxy.adapters import converse
from gatewayproxy.adapters.base import Adapter, Shape, StreamDecoder, UpstreamCall
from gatewayproxy.context import Operation
from gatewayproxy.http.sse import SseEvent
from gatewayproxy.vaults.cloud import AwsCredentialChain
from gatewayproxy.vaults.resolvers import Secret

BODY_VERSION = "bedrock-2023-05-31"
SERVICE = "bedrock"
INVOKE_FAMILY_MARKER = "anthropic."  # vendor B's models: `anthropic.claude-...`, `us.anthropic.claude-...`, ARNs
EVENT_STREAM = "application/vnd.amazon.eventstream"


def sigv4_credentials(secret: Secret) -> Credentials:
    """botocore credentials from an `aws_sigv4` secret."""
    access_key = secret.fields.get("access_key_id") or secret.token
    return Credentials(
        str(access_key), str(secret.fields.get("secret_access_key", "")), secret.fields.get("session_token")
    )


def _error_event(headers: dict[str, Any], payload: bytes) -> SseEvent:
    kind = str(headers.get(":exception-type") or headers.get(":error-code") or "api_error")
    try:
        message = json.loads(payload or b"{}").get("message", kind)
    except ValueError:
        message = payload.decode("utf-8", "replace") or kind
    return SseEvent("error", json.dumps({"type": "error", "error": {"type": kind, "message": message}}))


class EventStreamDecoder:
    """Vendor D's binary event stream (invoke's `chunk` events) to events named like the messages stream."""

    def __init__(self) -> None:
        self._buffer = EventStreamBuffer()

    def feed(self, chunk: bytes) -> list[SseEvent]:
        """Events completed by `chunk`."""
        self._buffer.add_data(chunk)
        return [event for message in self._buffer for event in self._events(message.headers, message.payload)]

    def _events(self, headers: dict[str, Any], payload: bytes) -> list[SseEvent]:
        if headers.get(":message-type") != "event":
            return [_error_event(headers, payload)]
        inner = base64.b64decode(json.loads(payload)["bytes"]).decode()
        return [SseEvent(json.loads(inner).get("type", ""), inner)]


class ConverseStreamDecoder(EventStreamDecoder):
    """ConverseStream's binary event stream to messages events."""

    def __init__(self, model: str) -> None:
        super().__init__()
        self._events_of = converse.ConverseEvents(model)

    def _events(self, headers: dict[str, Any], payload: bytes) -> list[SseEvent]:
        if headers.get(":message-type") != "event":
            return [_error_event(headers, payload)]
        return self._events_of.event(str(headers.get(":event-type", "")), json.loads(payload or b"{}"))


class VendorDAdapter(Adapter):
    """Cloud vendor D: the model id goes in the path; the model family picks the call."""

    shape = Shape.MESSAGES
    operations: ClassVar[frozenset[Operation]] = frozenset({Operation.MESSAGES, Operation.EMBEDDINGS})

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._chain = AwsCredentialChain(self.destination.profile) if self.destination.credentials is None else None

    @property
    def region(self) -> str:
        """The service region (default `us-east-1`)."""
        return self.destination.region or "us-east-1"

    def base_url(self) -> str:
        return (self.destination.base_url or f"https://bedrock-runtime.{self.region}.amazonaws.com").rstrip("/")

    def uses_converse(self, upstream_model: str) -> bool:
        """Whether a (provider-native) model id takes the conversation API rather than the invoke call."""
        if self.destination.api is not None:
            return self.destination.api == "converse"
        return INVOKE_FAMILY_MARKER not in upstream_model

    def shape_for(self, operation: Operation, model: Any) -> Shape:
        return Shape.CHAT if operation is Operation.EMBEDDINGS else Shape.MESSAGES

    async def credentials(self, scope: Mapping[str, str]) -> Any:
        """The signing credentials: the vault's secret, or the credential chain's current ones."""
        if self._chain is not None:
            return await self._chain.frozen()
        return sigv4_credentials(await self.secret(scope))

    async def build(
        self, operation: Operation, body: dict[str, Any], stream: bool, scope: Mapping[str, str]
    ) -> UpstreamCall:
        model = str(body.get("model", ""))
        accept = EVENT_STREAM if stream else "application/json"
        if operation is Operation.EMBEDDINGS:
            action, payload = "invoke", converse.embedding_request(body, model)
            accept = "application/json"
        elif self.uses_converse(model):
            action, payload = ("converse-stream" if stream else "converse"), converse.converse_request(body)
        else:
            payload = {key: value for key, value in body.items() if key not in ("model", "stream")}
            payload.setdefault("anthropic_version", BODY_VERSION)
            action = "invoke-with-response-stream" if stream else "invoke"
        relative = f"/model/{quote(model, safe='')}/{action}"
        data = self.encode(payload)
        request = AWSRequest(
            method="POST",
            url=f"{self.base_url()}{relative}",
            data=data,
            headers={"content-type": "application/json", "accept": accept},
        )
        SigV4Auth(await self.credentials(scope), SERVICE, self.region).add_auth(request)
        headers = [(name.lower().encode(), str(value).encode()) for name, value in request.headers.items()]
        return UpstreamCall(self.origin, b"POST", (self.origin.base_path + relative).encode(), headers, data)

    def embeds_one_text_per_call(self, model: Any) -> bool:
        return not converse.is_cohere(str(self.upstream_model(model) or ""))

    def stream_decoder(self, operation: Operation, model: Any) -> StreamDecoder:
        if self.uses_converse(str(self.upstream_model(model) or "")):
            return ConverseStreamDecoder(str(model or ""))
        return EventStreamDecoder()

    def decode_answer(self, operation: Operation, model: Any, status: int, body: bytes) -> bytes:
        if not 200 <= status < 300:
            return converse.error_document(status, body)
        upstream = str(self.upstream_model(model) or "")
        if operation is not Operation.EMBEDDINGS and not self.uses_converse(upstream):
            return body
        try:
            document = orjson.loads(body)
            if operation is Operation.EMBEDDINGS:
                return orjson.dumps(converse.embeddings_response(document, str(model or "")))
            return orjson.dumps(converse.messages_response(document, str(model or "")))
        except (orjson.JSONDecodeError, AttributeError, TypeError, KeyError, ValueError):
            return body  # the dispatcher calls it malformed
