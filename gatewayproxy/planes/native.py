"""The native API-key proxy: `POST /v1/proxy/{provider}/<path>` relayed to the one `native_api_key` destination
of that provider, through its allowlists, with the vault's credential and no retry, fallback or rewriting."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import unquote

from gatewayproxy.config.auth import AuthPlacement
from gatewayproxy.config.models import Destination, GatewayConfig
from gatewayproxy.context import RequestContext
from gatewayproxy.errors import ErrorCode, GatewayError
from gatewayproxy.planes.passthrough import call_once, picked_headers, relayed_headers, resolve_secret, streamed
from gatewayproxy.server.protocol import Response
from gatewayproxy.server.upstream import Origin
from gatewayproxy.state import Runtime

PREFIX = "/v1/proxy/"
# The body is relayed as sent, so the header that says what it is goes with it.
BODY_HEADERS = ("content-type",)


def split_proxy_path(path: str) -> tuple[str, str]:
    """`/v1/proxy/{provider}/{rest}` as (provider, `/rest`); 404 when either part is missing."""
    provider, slash, rest = path.removeprefix(PREFIX).partition("/")
    if not provider or not slash or not rest:
        raise GatewayError(ErrorCode.NOT_FOUND, "use /v1/proxy/{provider}/{path}")
    return provider, "/" + rest


def allowed_query(query: str, allowed: list[str]) -> str:
    """The query string keeping only the parameters named in `allowed`, each pair byte for byte."""
    names = set(allowed)
    pairs = [pair for pair in query.split("&") if pair and unquote(pair.partition("=")[0]) in names]
    return "&".join(pairs)


def _is_traversal(path: str) -> bool:
    segments = unquote(path).split("/")
    return any(segment in (".", "..") for segment in segments) or "//" in path


class NativeProxy:
    """Serves `/v1/proxy/...` requests from the current snapshot's `native_api_key` destinations."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    @staticmethod
    def destination(config: GatewayConfig, provider: str) -> tuple[str, Destination]:
        """The one destination configured for `provider` (boot refuses two)."""
        found = [
            (name, destination)
            for name, destination in config.destinations.items()
            if destination.kind == "native_api_key" and destination.provider == provider
        ]
        if len(found) != 1:
            raise GatewayError(ErrorCode.NO_ROUTE, f"no native_api_key destination serves provider {provider!r}")
        return found[0]

    async def serve(self, context: RequestContext, finish: Callable[[RequestContext], None]) -> Response:
        """Relay one request; raises `GatewayError` for anything refused before the upstream."""
        request = context.request
        if request.method != "POST":
            raise GatewayError(ErrorCode.METHOD_NOT_ALLOWED, "the native API-key proxy accepts POST")
        provider, path = split_proxy_path(request.path)
        context.principal = await context.state.identity.authenticate(request.headers)
        name, destination = self.destination(context.state.config, provider)
        context.route = context.destination = name
        if _is_traversal(path) or path not in (destination.allowed_paths or []):
            raise GatewayError(ErrorCode.PATH_NOT_ALLOWED, f"{path} is not an allowed path of provider {provider!r}")
        await context.state.runner.admit(context)
        origin = Origin.parse(destination.base_url or "")
        query = allowed_query(request.query, destination.allowed_query_params or [])
        target = (origin.base_path + path + (f"?{query}" if query else "")).encode()
        secret = await resolve_secret(
            context.state.vaults[destination.vault_name], destination.credential_id, context.scope
        )
        headers = self._headers(context, destination, secret.token)
        timeout = context.state.config.server.request_timeout_ms / 1000
        upstream = await call_once(self.runtime.pool, origin, b"POST", target, headers, request.body, timeout, context)
        return streamed(upstream, relayed_headers(upstream), context, finish)

    @staticmethod
    def _headers(context: RequestContext, destination: Destination, token: str) -> list[tuple[bytes, bytes]]:
        """Allowlisted client headers, then the configured ones, then the credential (each overriding the last)."""
        placement = AuthPlacement.parse(destination.auth or {})
        configured = [(name.lower().encode(), value.encode()) for name, value in (destination.headers or {}).items()]
        credential = placement.headers(token)
        overridden = {name for name, _ in configured} | {name for name, _ in credential}
        forwarded = picked_headers(context.request.headers, [*BODY_HEADERS, *(destination.forward_headers or [])])
        return [
            *[(n, v) for n, v in forwarded if n not in overridden],
            *[(n, v) for n, v in configured if n != placement.header],
            *credential,
        ]
