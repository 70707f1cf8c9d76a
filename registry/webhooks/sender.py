"""One webhook request: resolve the endpoint's host and check every address (registry.core.egress), sign the body
(Standard Webhooks), POST it to a checked address with the original Host header and TLS name, and say how it went.

Connecting to the address that was checked, not to the name, is what keeps a DNS answer that changed to a private
address from being reached (no rebinding between check and use). Redirects are never followed; only a 2xx counts.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache

import httpx
from standardwebhooks import Webhook

from registry.core.egress import DEFAULT_PORTS, EgressRefused, EgressRules, IpAddress, check_addresses, resolve
from registry.webhooks.client import (
    IDLE_CONNECTION_SECONDS,
    ConnectionClosed,
    ConnectionPool,
    ProtocolBroken,
    WebhookConnection,
    open_connection,
)

logger = logging.getLogger(__name__)

USER_AGENT = "agent-registry-webhooks/1.0"
RESPONSE_BODY_LIMIT = 2048
ERROR_LIMIT = 512


@dataclass(frozen=True)
class Message:
    """What one attempt posts: the event's id (`webhook-id`), its JSON body, where, the secret to sign with, and
    whose connections carry it (`owner`, the endpoint's id: endpoints never share a connection, so one that is
    slow cannot hold another's)."""

    url: str
    webhook_id: str
    body: bytes
    secret: str
    owner: str


@dataclass(frozen=True)
class SendResult:
    """How an attempt went: `succeeded` on a 2xx; otherwise `error` says why and `outcome` names it for metrics
    (`http_status`, `redirect`, `timeout`, `connection`, `tls`, `protocol`, `egress_refused`, `invalid_url`,
    `no_secret`, `error`)."""

    started_at: datetime
    latency_ms: int
    status: int | None
    body: str
    error: str
    outcome: str

    @property
    def succeeded(self) -> bool:
        return self.outcome == "succeeded"


class Refused(Exception):
    """The attempt ends before any connection: `outcome` and the message are recorded."""

    def __init__(self, outcome: str, message: str) -> None:
        super().__init__(message)
        self.outcome = outcome


@dataclass(frozen=True)
class Destination:
    """A URL split for a pinned connection: the name to resolve and check (IDNA-encoded), the Host header, the
    port, the request target, and whether it is TLS."""

    host: str
    host_header: str
    port: int
    target: bytes
    tls: bool

    @classmethod
    @lru_cache(maxsize=4096)
    def parse(cls, raw: str) -> Destination:
        try:
            url = httpx.URL(raw)
        except httpx.InvalidURL as error:
            raise Refused("invalid_url", f"invalid URL: {error}") from None
        if url.scheme not in DEFAULT_PORTS or not url.host:
            raise Refused("invalid_url", "invalid URL: only http and https URLs with a host are sent to")
        target = url.raw_path or b"/"
        if any(byte <= 0x20 or byte == 0x7F for byte in target):
            raise Refused("invalid_url", "invalid URL: its path has spaces or control characters")
        return cls(
            host=url.raw_host.decode("ascii"),
            host_header=url.netloc.decode("ascii"),
            port=url.port or DEFAULT_PORTS[url.scheme],
            target=target,
            tls=url.scheme == "https",
        )


@lru_cache(maxsize=4096)
def signer(secret: str) -> Webhook:
    return Webhook(secret)


def request_bytes(message: Message, destination: Destination, now: float) -> bytes:
    """The request: Standard Webhooks' three headers (signed over id, timestamp and body), JSON, our agent."""
    timestamp = int(now)
    signature = signer(message.secret).sign(
        msg_id=message.webhook_id, timestamp=datetime.fromtimestamp(timestamp, UTC), data=message.body.decode()
    )
    head = (
        f"POST {destination.target.decode('ascii')} HTTP/1.1\r\n"
        f"host: {destination.host_header}\r\n"
        "content-type: application/json\r\n"
        f"content-length: {len(message.body)}\r\n"
        f"user-agent: {USER_AGENT}\r\n"
        "accept-encoding: identity\r\n"
        f"webhook-id: {message.webhook_id}\r\n"
        f"webhook-timestamp: {timestamp}\r\n"
        f"webhook-signature: {signature}\r\n"
        "\r\n"
    )
    return head.encode("ascii") + message.body


class Progress:
    """The connection an attempt is on, so a timeout after the status came still reports the status."""

    def __init__(self) -> None:
        self.connection: WebhookConnection | None = None

    @property
    def status(self) -> int | None:
        return self.connection.status if self.connection is not None else None


class Sender:
    """Sends attempts concurrently on keep-alive connections (HTTP/1.1), one pool per endpoint and destination
    (the caller keeps each endpoint within its concurrency, which bounds the pool)."""

    def __init__(self, *, timeout: float, rules: Callable[[], EgressRules]) -> None:
        self.timeout = timeout
        self.rules = rules
        self.pools: dict[tuple[str, str, str, int, bool], ConnectionPool] = {}

    async def send(self, message: Message) -> SendResult:
        started_at = datetime.now(UTC)
        started = time.monotonic()
        progress = Progress()
        status: int | None = None
        body = b""
        try:
            async with asyncio.timeout(self.timeout):
                if not message.secret:
                    raise Refused("no_secret", "the endpoint's signing secret could not be read")
                destination = Destination.parse(message.url)
                addresses = await self._checked_addresses(destination)
                status, body = await self._post(destination, addresses, message, progress)
        except Refused as refused:
            return self._result(started_at, started, None, b"", str(refused), refused.outcome)
        except TimeoutError:
            if progress.status is not None:  # the status came, the body did not finish: the status decides
                return self._judged(started_at, started, progress.status, b"")
            return self._result(started_at, started, None, b"", "timeout", "timeout")
        except ConnectionRefusedError:
            return self._result(started_at, started, None, b"", "connection refused", "connection")
        except ssl.SSLCertVerificationError as error:
            return self._result(started_at, started, None, b"", f"TLS: {error.verify_message}", "tls")
        except ssl.SSLError as error:
            return self._result(started_at, started, None, b"", f"TLS: {error.reason or error}", "tls")
        except ConnectionClosed as error:
            return self._result(started_at, started, None, b"", str(error), "connection")
        except ProtocolBroken as error:
            return self._result(started_at, started, None, b"", str(error), "protocol")
        except OSError as error:
            return self._result(started_at, started, None, b"", f"connection failed: {describe(error)}", "connection")
        except Exception as error:  # a bug here must not lose the attempt: it is recorded as failed, and retried
            logger.exception("webhook %s: sending failed", message.webhook_id)
            return self._result(started_at, started, None, b"", f"{type(error).__name__}: {error}", "error")
        return self._judged(started_at, started, status, body)

    async def _checked_addresses(self, destination: Destination) -> list[IpAddress]:
        try:
            addresses: list[IpAddress] = [ipaddress.ip_address(destination.host.strip("[]"))]
        except ValueError:
            loop = asyncio.get_running_loop()
            try:
                addresses = await loop.run_in_executor(None, resolve, destination.host, destination.port)
            except EgressRefused as error:
                raise Refused("egress_refused", f"egress refused: {error}") from None
        try:
            check_addresses(destination.host, destination.port, addresses, self.rules())
        except EgressRefused as error:
            says = error.rule.says if error.rule else "is not allowed"
            if destination.host.strip("[]") == str(error.address):
                raise Refused("egress_refused", f"egress refused: {error.address} {says}") from None
            message = f"egress refused: {destination.host} resolves to {error.address}, which {says}"
            raise Refused("egress_refused", message) from None
        return addresses

    async def _post(
        self, destination: Destination, addresses: list[IpAddress], message: Message, progress: Progress
    ) -> tuple[int, bytes]:
        """POST to the first address that takes a connection: the status and the body's first bytes."""
        request = request_bytes(message, destination, time.time())
        for index, address in enumerate(addresses):
            key = (message.owner, destination.host, str(address), destination.port, destination.tls)
            pool = self.pools.get(key) or self.pools.setdefault(key, ConnectionPool())
            pool.in_use += 1
            try:
                return await self._exchange(pool, destination, str(address), request, progress)
            except OSError:
                if index == len(addresses) - 1 or progress.connection is not None:
                    raise  # only a connection that could not be opened moves on to the next address
            finally:
                pool.in_use -= 1
                pool.last_used = time.monotonic()
        raise AssertionError("unreachable: the address list is never empty")

    async def _exchange(
        self, pool: ConnectionPool, destination: Destination, address: str, request: bytes, progress: Progress
    ) -> tuple[int, bytes]:
        connection = pool.take()
        for fresh in (connection is None, True):
            if fresh:
                tls_name = destination.host if destination.tls else None
                connection = await open_connection(
                    address, destination.port, tls_name=tls_name, body_limit=RESPONSE_BODY_LIMIT
                )
            assert connection is not None
            progress.connection = connection
            try:
                response = await connection.exchange(request)
            except ConnectionClosed as closed:
                connection.close()
                if fresh or not closed.answered_nothing:
                    raise
                continue  # a kept-alive connection the receiver had closed: once more on a new one
            except BaseException:
                connection.close()  # a timeout, or the process stopping: this connection's state is unknown
                raise
            pool.give_back(connection)
            return response.status, response.body
        raise AssertionError("unreachable: the second try is on a fresh connection")

    def _judged(self, started_at: datetime, started: float, status: int, body: bytes) -> SendResult:
        if 200 <= status < 300:
            return self._result(started_at, started, status, body, "", "succeeded")
        if 300 <= status < 400:
            return self._result(started_at, started, status, body, "redirect not followed", "redirect")
        return self._result(started_at, started, status, body, f"HTTP {status}", "http_status")

    @staticmethod
    def _result(
        started_at: datetime, started: float, status: int | None, body: bytes, error: str, outcome: str
    ) -> SendResult:
        text = body[:RESPONSE_BODY_LIMIT].decode("utf-8", "replace").replace("\x00", "\ufffd")
        latency = round((time.monotonic() - started) * 1000)
        return SendResult(started_at, latency, status, text, error[:ERROR_LIMIT], outcome)

    def close_idle(self) -> None:
        """Close connections unused for a while, and forget pools with none left (endpoints removed, addresses
        changed)."""
        for key, pool in list(self.pools.items()):
            pool.close_idle(IDLE_CONNECTION_SECONDS)
            if not pool.idle and not pool.in_use:
                del self.pools[key]

    def close(self) -> None:
        for pool in self.pools.values():
            pool.close()
        self.pools = {}


def describe(error: OSError) -> str:
    return error.strerror or str(error) or type(error).__name__
