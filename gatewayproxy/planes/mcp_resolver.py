"""The wildcard `mcp` destination: its `destination_resolver` (kind `http`) turns the server a client names
(`x-mcp-server` header) into an upstream `base_url`, and optionally a credential id, cached for a TTL.

The client only names a server; the URL always comes from the resolver, which is configured by the operator.
`url_template` interpolates `{server}` and `{scope.<dim>}` (URL-quoted); the resolver answers
`{"base_url": "https://...", "credential_id": "..."}` (the credential id is optional).
"""

from __future__ import annotations

import re
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

import orjson

from gatewayproxy.config.models import Destination, DestinationResolver
from gatewayproxy.errors import ErrorCode, GatewayError
from gatewayproxy.server.upstream import Origin, UpstreamError, UpstreamPool, fetcher
from gatewayproxy.vaults.resolvers import filled_template, read_token_file

SERVER_HEADER = "x-mcp-server"
MAX_CACHED = 1024
_SERVER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_TEMPLATE_FIELD = re.compile(r"\{(server|scope\.[^}]+)\}")


@dataclass(frozen=True)
class Resolved:
    """Where one named server lives."""

    base_url: str
    credential_id: str | None


def resolver_url(resolver: DestinationResolver, server: str, scope: Mapping[str, str]) -> str:
    """The resolver URL for `server`; a scope dimension the principal lacks is refused."""
    return filled_template(
        _TEMPLATE_FIELD,
        resolver.url_template,
        server,
        scope,
        lambda dim: GatewayError(ErrorCode.FORBIDDEN, f"the MCP resolver needs scope dimension {dim!r}"),
    )


def requested_server(headers: Mapping[str, str]) -> str:
    """The server the client names; only a plain name is accepted, never a URL."""
    server = headers.get(SERVER_HEADER, "")
    if not _SERVER_NAME.fullmatch(server):
        raise GatewayError(
            ErrorCode.INVALID_REQUEST, f"name the MCP server in `{SERVER_HEADER}` (letters, digits, '.', '_' and '-')"
        )
    return server


def _parsed(body: bytes) -> Resolved:
    try:
        document = orjson.loads(body)
        base_url = document["base_url"]
        Origin.parse(base_url)
        credential_id = document.get("credential_id")
    except (orjson.JSONDecodeError, TypeError, KeyError, ValueError, AttributeError):
        raise GatewayError(ErrorCode.UPSTREAM_ERROR, "the MCP resolver answered without a valid base_url") from None
    return Resolved(base_url=base_url, credential_id=str(credential_id) if credential_id else None)


class McpResolver:
    """Looks servers up through a destination's resolver; answers are cached per URL for the resolver's TTL."""

    def __init__(self, pool: UpstreamPool) -> None:
        self._fetch = fetcher(pool)
        self._cache: OrderedDict[str, tuple[float, Resolved]] = OrderedDict()

    async def concrete(
        self, destination: Destination, headers: Mapping[str, str], scope: Mapping[str, str]
    ) -> Destination:
        """`destination` itself when static; else the resolved server's destination."""
        resolver = destination.destination_resolver
        if resolver is None:
            return destination
        resolved = await self._lookup(resolver, resolver_url(resolver, requested_server(headers), scope))
        credentials = destination.credentials
        if resolved.credential_id and credentials is not None:
            credentials = credentials.model_copy(update={"credential_id": resolved.credential_id})
        return destination.model_copy(
            update={
                "base_url": resolved.base_url,
                "url": None,
                "destination_resolver": None,
                "credentials": credentials,
            }
        )

    async def _lookup(self, resolver: DestinationResolver, url: str) -> Resolved:
        cached = self._cache.get(url)
        if cached is not None and cached[0] > time.monotonic():
            self._cache.move_to_end(url)
            return cached[1]
        resolved = await self._download(resolver, url)
        self._cache[url] = (time.monotonic() + resolver.cache_ttl_secs, resolved)
        self._cache.move_to_end(url)
        while len(self._cache) > MAX_CACHED:
            self._cache.popitem(last=False)
        return resolved

    async def _download(self, resolver: DestinationResolver, url: str) -> Resolved:
        headers = {"accept": "application/json"}
        if resolver.bearer_token_file:
            headers["authorization"] = "Bearer " + read_token_file(resolver.bearer_token_file)
        try:
            status, body = await self._fetch(url, headers, resolver.timeout_ms / 1000)
        except (UpstreamError, OSError):
            raise GatewayError(ErrorCode.UPSTREAM_ERROR, "the MCP resolver is unreachable or too slow") from None
        if status == 404:
            raise GatewayError(ErrorCode.NO_ROUTE, "the MCP resolver knows no such server")
        if status != 200:
            raise GatewayError(ErrorCode.UPSTREAM_ERROR, f"the MCP resolver answered {status}")
        return _parsed(body)
