"""Byte-for-byte relaying shared by the native API-key proxy and MCP: one upstream call (no retry), its
failures mapped to gateway errors, and its response streamed back with hop-by-hop headers removed."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping

from gatewayproxy.context import RequestContext
from gatewayproxy.errors import ErrorCode, GatewayError
from gatewayproxy.server.protocol import Response
from gatewayproxy.server.upstream import Origin, UpstreamError, UpstreamPool, UpstreamResponse
from gatewayproxy.vaults.resolvers import Secret, VaultError, VaultResolver, VaultUnavailable

# Headers that describe one connection or the framing of one message; never relayed in either direction.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "transfer-encoding",
        "te",
        "trailer",
        "upgrade",
        "host",
        "content-length",
        "proxy-authorization",
        "proxy-authenticate",
    }
)


def picked_headers(headers: Mapping[str, str], allowed: Iterable[str]) -> list[tuple[bytes, bytes]]:
    """The request headers named in `allowed` (case-insensitive), minus hop-by-hop and client credentials."""
    names = {name.lower() for name in allowed} - HOP_BY_HOP - {"authorization", "cookie"}
    return [(name.encode(), value.encode("latin-1")) for name, value in headers.items() if name in names]


def relayed_headers(upstream: UpstreamResponse, drop: frozenset[str] = frozenset()) -> list[tuple[bytes, bytes]]:
    """The upstream response headers a client may see."""
    return [
        (name, value)
        for name, value in upstream.headers
        if name.decode("latin-1") not in HOP_BY_HOP and name.decode("latin-1") not in drop
    ]


async def call_once(
    pool: UpstreamPool,
    origin: Origin,
    method: bytes,
    target: bytes,
    headers: list[tuple[bytes, bytes]],
    body: bytes,
    timeout: float,
    context: RequestContext,
) -> UpstreamResponse:
    """Send one request and wait for its response head; failures become 502/504 gateway errors."""
    started = time.perf_counter()
    try:
        async with asyncio.timeout(timeout):
            return await pool.request(origin, method, target, headers, body)
    except TimeoutError:
        raise GatewayError(ErrorCode.UPSTREAM_TIMEOUT, f"{context.destination!r} did not answer in time") from None
    except (UpstreamError, OSError) as error:
        raise GatewayError(ErrorCode.UPSTREAM_ERROR, f"{context.destination!r}: {error}") from None
    finally:
        context.upstream_seconds += time.perf_counter() - started


async def resolve_secret(vault: VaultResolver, credential_id: str, scope: Mapping[str, str]) -> Secret:
    """A destination credential; a vault failure is the gateway's 502, never the client's fault."""
    try:
        return await vault.resolve(credential_id, scope)
    except VaultUnavailable as error:
        raise GatewayError(ErrorCode.VAULT_UNAVAILABLE, f"the destination credential is unavailable: {error}") from None
    except VaultError as error:
        raise GatewayError(ErrorCode.UPSTREAM_ERROR, f"the destination credential is unavailable: {error}") from None


def streamed(
    upstream: UpstreamResponse,
    headers: list[tuple[bytes, bytes]],
    context: RequestContext,
    finish: Callable[[RequestContext], None],
) -> Response:
    """The upstream response relayed chunk by chunk; the request is accounted for after its last byte."""

    async def relay() -> AsyncIterator[bytes]:
        try:
            async for chunk in upstream.chunks():
                yield chunk
        finally:
            upstream.release()
            context.status = upstream.status
            finish(context)

    return Response(upstream.status, headers, stream=relay())
