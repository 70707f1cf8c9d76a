"""The `vendor_e` adapter: cloud vendor E's model service, addressed by project, location and model, with OAuth.

Two model families, chosen from the (provider-native) model id: `claude-*` is the partner publisher's
(messages-shaped, `rawPredict` / `streamRawPredict`); everything else is the vendor's own (the generate-content
shape, spoken here in the chat shape: `generateContent` / `streamGenerateContent?alt=sse`). Embeddings go to the
vendor's embedding models through `predict`. Credentials: with `credentials`, the vault's secret (an access
token, `bearer`, or a google-auth document such as a service account); without, application default credentials
found by google-auth. Tokens are refreshed off the event loop and kept until near expiry.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar
from urllib.parse import quote

import orjson

from gatewayproxy.adapters import gemini
from gatewayproxy.adapters.base import JSON_HEADERS, SSE_HEADERS, Adapter, Shape, StreamDecoder, UpstreamCall
from gatewayproxy.context import Operation
from gatewayproxy.errors import ErrorCode, GatewayError
from gatewayproxy.http.sse import SseDecoder
from gatewayproxy.vaults.cloud import GoogleCredentials

BODY_VERSION = "vertex-2023-10-16"
PARTNER_PREFIX = "claude-"


def is_partner(upstream_model: str) -> bool:
    """Whether a model id is the partner publisher's (vendor B's models) rather than the vendor's own."""
    return upstream_model.startswith(PARTNER_PREFIX)


class VendorEAdapter(Adapter):
    """Publisher models addressed by project, location and model."""

    shape = Shape.MESSAGES
    operations: ClassVar[frozenset[Operation]] = frozenset({Operation.MESSAGES, Operation.CHAT, Operation.EMBEDDINGS})

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._tokens = GoogleCredentials()

    def base_url(self) -> str:
        location = self.destination.location
        host = "aiplatform.googleapis.com" if location == "global" else f"{location}-aiplatform.googleapis.com"
        return (self.destination.base_url or f"https://{host}/v1").rstrip("/")

    def _partner(self, model: Any) -> bool:
        return is_partner(str(self.upstream_model(model) or ""))

    def shape_for(self, operation: Operation, model: Any) -> Shape:
        if operation is Operation.EMBEDDINGS or not self._partner(model):
            return Shape.CHAT
        return Shape.MESSAGES

    def _model_path(self, publisher: str, model: str, action: str) -> str:
        destination = self.destination
        return (
            f"{self.origin.base_path}/projects/{destination.project}/locations/{destination.location}"
            f"/publishers/{publisher}/models/{quote(model, safe='')}:{action}"
        )

    async def _authorization(self, scope: Mapping[str, str]) -> tuple[bytes, bytes]:
        secret = await self.secret(scope) if self.destination.credentials is not None else None
        token = await self._tokens.token(secret)
        return (b"authorization", b"Bearer " + token.encode())

    async def build(
        self, operation: Operation, body: dict[str, Any], stream: bool, scope: Mapping[str, str]
    ) -> UpstreamCall:
        model = str(body.get("model", ""))
        if operation is Operation.EMBEDDINGS:
            path, payload, stream = self._model_path("google", model, "predict"), embeddings_request(body), False
        elif is_partner(model):
            payload = {key: value for key, value in body.items() if key != "model"}
            payload.setdefault("anthropic_version", BODY_VERSION)
            path = self._model_path("anthropic", model, "streamRawPredict" if stream else "rawPredict")
        else:
            payload = gemini.generate_request(body)
            action = "streamGenerateContent?alt=sse" if stream else "generateContent"
            path = self._model_path("google", model, action)
        headers = [*(SSE_HEADERS if stream else JSON_HEADERS), await self._authorization(scope)]
        return UpstreamCall(self.origin, b"POST", path.encode(), headers, self.encode(payload))

    def stream_decoder(self, operation: Operation, model: Any) -> StreamDecoder:
        if self._partner(model):
            return SseDecoder()
        return gemini.GenerateStreamDecoder(str(model or ""))

    def decode_answer(self, operation: Operation, model: Any, status: int, body: bytes) -> bytes:
        if operation is not Operation.EMBEDDINGS and self._partner(model):
            return body
        if not 200 <= status < 300:
            return gemini.error_document(status, body)
        try:
            document = orjson.loads(body)
            if operation is Operation.EMBEDDINGS:
                return orjson.dumps(embeddings_response(document, str(model or "")))
            return orjson.dumps(gemini.chat_response(document, str(model or "")))
        except (orjson.JSONDecodeError, AttributeError, TypeError, KeyError, ValueError):
            return body  # the dispatcher calls it malformed


def embeddings_request(body: dict[str, Any]) -> dict[str, Any]:
    """The predict body of an embeddings request."""
    value = body.get("input")
    texts = [value] if isinstance(value, str) else value
    if not isinstance(texts, list) or not all(isinstance(text, str) for text in texts):
        raise GatewayError(
            ErrorCode.UNSUPPORTED_PARAMETER, "embedding inputs are text (a string or a list of strings)", param="input"
        )
    request: dict[str, Any] = {"instances": [{"content": text} for text in texts]}
    if body.get("dimensions"):
        request["parameters"] = {"outputDimensionality": body["dimensions"]}
    return request


def embeddings_response(document: dict[str, Any], model: str) -> dict[str, Any]:
    """The embeddings-shaped answer of a predict answer (float vectors; token counts summed)."""
    data, tokens = [], 0
    for index, prediction in enumerate(document.get("predictions") or []):
        embeddings = prediction.get("embeddings") or {}
        tokens += int((embeddings.get("statistics") or {}).get("token_count") or 0)
        data.append({"object": "embedding", "index": index, "embedding": embeddings.get("values") or []})
    return {"object": "list", "data": data, "model": model, "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}
