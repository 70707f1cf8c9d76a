"""What every destination adapter provides: its native shape, the operations it serves, and how it turns a
native-shape body into an authenticated upstream call."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import orjson

from gatewayproxy.config.models import Destination
from gatewayproxy.context import Operation
from gatewayproxy.http.sse import SseDecoder, SseEvent
from gatewayproxy.server.upstream import Origin
from gatewayproxy.vaults.resolvers import Secret, VaultError, VaultResolver


class Shape(enum.Enum):
    """The body shape a destination speaks natively."""

    CHAT = "chat"
    MESSAGES = "messages"


JSON_HEADERS = [(b"content-type", b"application/json"), (b"accept", b"application/json")]
SSE_HEADERS = [(b"content-type", b"application/json"), (b"accept", b"text/event-stream")]


@dataclass(frozen=True)
class UpstreamCall:
    """A ready-to-send upstream request."""

    origin: Origin
    method: bytes
    path: bytes
    headers: list[tuple[bytes, bytes]]
    body: bytes


class StreamDecoder(Protocol):
    """Turns upstream body chunks into events."""

    def feed(self, chunk: bytes) -> list[SseEvent]:
        """Events completed by `chunk`."""
        ...


class Adapter:
    """Base adapter: a destination with its origin and vault; subclasses place credentials and build paths."""

    shape: ClassVar[Shape] = Shape.CHAT
    operations: ClassVar[frozenset[Operation]] = frozenset({Operation.CHAT})
    default_base_url: ClassVar[str] = ""

    def __init__(self, name: str, destination: Destination, vault: VaultResolver | None) -> None:
        self.name = name
        self.destination = destination
        self.vault = vault
        self.origin = Origin.parse(self.base_url())

    def base_url(self) -> str:
        """The configured base URL, or the adapter's default."""
        return (self.destination.base_url or self.default_base_url).rstrip("/")

    def upstream_model(self, model: Any) -> Any:
        """The provider-native model id (`model_map`)."""
        return self.destination.model_map.get(model, model) if isinstance(model, str) else model

    async def secret(self, scope: Mapping[str, str]) -> Secret:
        """The provider credential for this request."""
        if self.vault is None:
            raise VaultError(f"destination {self.name!r} names no vault")
        return await self.vault.resolve(self.destination.credential_id, scope)

    def shape_for(self, operation: Operation, model: Any) -> Shape:
        """The shape this destination speaks for a request (`model`: as the client asked); one shape unless a
        destination serves model families of different shapes."""
        return self.shape

    async def build(
        self, operation: Operation, body: dict[str, Any], stream: bool, scope: Mapping[str, str]
    ) -> UpstreamCall:
        """The upstream call for a native-shape body."""
        raise NotImplementedError

    def embeds_one_text_per_call(self, model: Any) -> bool:
        """Whether an embedding model (`model`: as the client asked) takes one text per call, so that a list of
        inputs is sent as one call per text (a fan-out)."""
        return False

    def stream_decoder(self, operation: Operation, model: Any) -> StreamDecoder:
        """How this destination frames streamed events, as events of `shape_for` (SSE unless overridden)."""
        return SseDecoder()

    def decode_answer(self, operation: Operation, model: Any, status: int, body: bytes) -> bytes:
        """A non-streamed answer in `shape_for`'s terms (error envelopes included); as sent unless the provider
        speaks a body shape of its own."""
        return body

    @staticmethod
    def encode(body: dict[str, Any]) -> bytes:
        """The JSON body bytes."""
        return orjson.dumps(body)
