"""The admin plane: health, readiness, metrics and the read side of the config API; no pipeline runs here.

A file-backed gateway is read-only: resource writes answer 409 `config_read_only`.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from urllib.parse import parse_qs

import orjson

from gatewayproxy.config.live import live_problems
from gatewayproxy.config.loader import ConfigError, parse_text, validate_document
from gatewayproxy.config.redact import public_view
from gatewayproxy.errors import ErrorCode, GatewayError, Protocol, error_body
from gatewayproxy.http.connection import Request
from gatewayproxy.pipeline import policy, pricing, usage
from gatewayproxy.pipeline.dispatch import JSON_CONTENT, error_response
from gatewayproxy.plugins.kinds import LIST_SLOTS, SINGLE_INSTANCE_SLOTS
from gatewayproxy.server.protocol import Response
from gatewayproxy.state import Runtime

WRITABLE_COLLECTIONS = ("destinations", "routes", "rate_limits", "vaults", "config/plugins")
METRICS_CONTENT = [(b"content-type", b"text/plain; version=0.0.4; charset=utf-8")]
Route = Callable[[Request], Awaitable[Response]]


def _json(document: object, status: int = 200) -> Response:
    return Response(status, JSON_CONTENT, orjson.dumps(document))


def _fail(code: ErrorCode, message: str) -> Response:
    return error_response(Protocol.VENDOR_A, GatewayError(code, message))


def _query(request: Request) -> dict[str, str]:
    """The query parameters of an admin request, the last value of each."""
    return {key: values[-1] for key, values in parse_qs(request.query).items()}


async def _answer(document: Awaitable[object]) -> Response:
    """The JSON of a read that may refuse with a `GatewayError`."""
    try:
        return _json(await document)
    except GatewayError as error:
        return error_response(Protocol.VENDOR_A, error)


def _read_token(path: str | None) -> str | None:
    if path is None:
        return None
    with open(path, encoding="utf-8") as handle:
        return handle.read().strip()


class AdminPlane:
    """The handler of the admin listener."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self._token = _read_token(runtime.state.config.server.admin_token_file)
        self._routes: dict[tuple[str, str], Route] = {
            ("GET", "/healthz"): self._healthz,
            ("GET", "/readyz"): self._readyz,
            ("GET", "/metrics"): self._metrics,
            ("GET", "/admin/v1/config"): self._config,
            ("POST", "/admin/v1/config/validate"): self._validate,
            ("GET", "/admin/v1/destinations"): self._destinations,
            ("GET", "/admin/v1/routes"): self._list_routes,
            ("GET", "/admin/v1/health/plugins"): self._plugin_health,
            ("GET", "/admin/v1/plugins"): self._plugins,
            ("POST", "/admin/v1/plugins"): self._wasm_disabled,
            ("GET", "/admin/v1/pricing/resolve"): self._pricing,
            ("GET", "/admin/v1/spend/usage"): self._usage,
            ("GET", "/admin/v1/guardrails/effective"): self._guardrails,
        }

    async def __call__(self, request: Request) -> Response:
        if self._token is not None and not self._authorized(request):
            return _fail(ErrorCode.UNAUTHENTICATED, "the admin plane needs `Authorization: Bearer <admin token>`")
        route = self._routes.get((request.method, request.path))
        if route is not None:
            return await route(request)
        return self._unrouted(request)

    def _authorized(self, request: Request) -> bool:
        assert self._token is not None
        presented = request.headers.get("authorization", "")
        return hmac.compare_digest(presented.encode(), f"Bearer {self._token}".encode())

    def _unrouted(self, request: Request) -> Response:
        if request.method in ("PUT", "DELETE") and self._is_resource_path(request.path) and self.runtime.file_backed:
            return _fail(ErrorCode.CONFIG_READ_ONLY, "this gateway is file-backed; its admin surface is read-only")
        if request.method == "DELETE" and request.path.startswith("/admin/v1/plugins/"):
            return _fail(ErrorCode.WASM_PLUGINS_DISABLED, "WASM plugins are disabled")
        if any(path == request.path for _, path in self._routes):
            return _fail(ErrorCode.METHOD_NOT_ALLOWED, f"{request.method} is not allowed on {request.path}")
        return _fail(ErrorCode.NOT_FOUND, f"no admin endpoint {request.path}")

    @staticmethod
    def _is_resource_path(path: str) -> bool:
        for collection in WRITABLE_COLLECTIONS:
            prefix = f"/admin/v1/{collection}/"
            if path.startswith(prefix) and "/" not in path.removeprefix(prefix) and path != prefix:
                return True
        return False

    async def _healthz(self, request: Request) -> Response:
        return _json({"status": "ok"})

    async def _readyz(self, request: Request) -> Response:
        if self.runtime.ready:
            return _json({"status": "ready"})
        return _json({"status": "starting"}, 503)

    async def _metrics(self, request: Request) -> Response:
        return Response(200, METRICS_CONTENT, self.runtime.metrics.exposition())

    async def _config(self, request: Request) -> Response:
        return _json(public_view(self.runtime.state.config))

    async def _validate(self, request: Request) -> Response:
        as_yaml = "yaml" in request.headers.get("content-type", "")
        try:
            loaded = validate_document(parse_text(request.body, as_json=not as_yaml))
            problems = live_problems(loaded.config)
        except ConfigError as error:
            problems = error.problems
        if not problems:
            return _json({"valid": True})
        document = error_body(Protocol.VENDOR_A, ErrorCode.INVALID_REQUEST.value, "; ".join(problems), 400)
        document["error"]["problems"] = problems
        return _json({"valid": False, **document}, 400)

    async def _destinations(self, request: Request) -> Response:
        destinations = self.runtime.state.config.destinations
        return _json({"data": [{"name": name, **public_view(destination)} for name, destination in
                               destinations.items()]})

    async def _list_routes(self, request: Request) -> Response:
        return _json({"data": [public_view(route) for route in self.runtime.state.config.routes]})

    def _plugin_rows(self) -> list[dict[str, str]]:
        plugins = self.runtime.state.config.plugins
        rows = []
        for slot in SINGLE_INSTANCE_SLOTS:
            instance = getattr(plugins, slot)
            if instance is not None:
                rows.append({"slot": slot, "name": instance.name, "kind": instance.kind, "status": "configured"})
        for slot in LIST_SLOTS:
            rows += [{"slot": slot, "name": instance.name, "kind": instance.kind, "status": "configured"}
                     for instance in getattr(plugins, slot)]
        return rows

    async def _plugin_health(self, request: Request) -> Response:
        rows = self._plugin_rows()
        return _json({"total": len(rows), "healthy": len(rows), "unhealthy": 0, "plugins": rows})

    async def _plugins(self, request: Request) -> Response:
        return _json({"data": []})

    async def _wasm_disabled(self, request: Request) -> Response:
        return _fail(ErrorCode.WASM_PLUGINS_DISABLED, "WASM plugins are disabled")

    async def _usage(self, request: Request) -> Response:
        return await _answer(usage.query_usage(self.runtime.state, _query(request)))

    async def _guardrails(self, request: Request) -> Response:
        return await _answer(policy.effective_bundle(self.runtime.state, _query(request)))

    async def _pricing(self, request: Request) -> Response:
        return await _answer(pricing.resolve_price(self.runtime.state, _query(request)))
