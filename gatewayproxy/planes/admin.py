"""The admin plane: health, readiness, metrics and the config API; no pipeline runs here.

A file-backed gateway is read-only: resource writes answer 409 `config_read_only`. A database-backed one
takes PUT/DELETE on its resources through a `ConfigWriter`, which validates the whole resulting document,
commits and swaps the snapshot; an invalid write is 400 with every problem and changes nothing.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from typing import Any
from typing import Protocol as Interface
from urllib.parse import parse_qs, unquote

import orjson

from gatewayproxy.config.kinds import LIST_SLOTS, SINGLE_INSTANCE_SLOTS
from gatewayproxy.config.loader import ConfigError, parse_text, validate_document
from gatewayproxy.config.redact import public_view, redact
from gatewayproxy.errors import ErrorCode, GatewayError, Protocol, error_body
from gatewayproxy.http.connection import Request
from gatewayproxy.pipeline import policy, pricing, usage
from gatewayproxy.pipeline.dispatch import JSON_CONTENT, error_response
from gatewayproxy.pipeline.live import live_problems
from gatewayproxy.server.protocol import Response
from gatewayproxy.state import Runtime
from gatewayproxy.store.document import EntryKey, EntryMissing, plugin_slots_named
from gatewayproxy.vaults.resolvers import read_token_file

# Admin path segment -> document collection.
WRITABLE_COLLECTIONS = {
    "destinations": "destinations",
    "routes": "routes",
    "rate_limits": "rate_limits",
    "vaults": "vaults",
    "config/plugins": "plugins",
}
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


def _invalid(problems: list[str]) -> dict[str, Any]:
    """The 400 body naming every problem of a document."""
    document = error_body(Protocol.VENDOR_A, ErrorCode.INVALID_REQUEST.value, "; ".join(problems), 400)
    document["error"]["problems"] = problems
    return document


class ConfigWriter(Interface):
    """Where admin writes go on a database-backed gateway (gatewayproxy.store.source.DatabaseConfig)."""

    async def put(self, key: EntryKey, body: dict[str, Any]) -> dict[str, Any]:
        """Upsert an entry and serve the result; returns the stored body."""

    async def delete(self, key: EntryKey) -> None:
        """Remove an entry and serve the result."""

    async def stored_document(self) -> dict[str, Any]:
        """The stored document now."""


class AdminPlane:
    """The handler of the admin listener."""

    def __init__(self, runtime: Runtime, writer: ConfigWriter | None = None) -> None:
        self.runtime = runtime
        self.writer = writer
        token_file = runtime.state.config.server.admin_token_file
        self._token = read_token_file(token_file) if token_file else None
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
        return await self._unrouted(request)

    def _authorized(self, request: Request) -> bool:
        assert self._token is not None
        presented = request.headers.get("authorization", "")
        return hmac.compare_digest(presented.encode(), f"Bearer {self._token}".encode())

    async def _unrouted(self, request: Request) -> Response:
        resource = self._resource(request.path)
        if request.method in ("PUT", "DELETE") and resource is not None:
            if self.runtime.file_backed or self.writer is None:
                return _fail(ErrorCode.CONFIG_READ_ONLY, "this gateway is file-backed; its admin surface is read-only")
            return await self._write(request, *resource)
        if request.method == "DELETE" and request.path.startswith("/admin/v1/plugins/"):
            return _fail(ErrorCode.WASM_PLUGINS_DISABLED, "WASM plugins are disabled")
        if any(path == request.path for _, path in self._routes):
            return _fail(ErrorCode.METHOD_NOT_ALLOWED, f"{request.method} is not allowed on {request.path}")
        return _fail(ErrorCode.NOT_FOUND, f"no admin endpoint {request.path}")

    @staticmethod
    def _resource(path: str) -> tuple[str, str] | None:
        """(collection, entry name) of a writable resource path."""
        for segment, collection in WRITABLE_COLLECTIONS.items():
            prefix = f"/admin/v1/{segment}/"
            name = path.removeprefix(prefix)
            if path.startswith(prefix) and name and "/" not in name:
                return collection, unquote(name)
        return None

    async def _write(self, request: Request, collection: str, name: str) -> Response:
        """PUT (body: the section's JSON form; plugins also name their `slot`) or DELETE one entry."""
        try:
            if request.method == "PUT":
                return await self._put(request, collection, name)
            await self._delete(request, collection, name)
            return Response(204, [], b"")
        except ConfigError as error:
            return _json(_invalid(error.problems), 400)
        except EntryMissing as error:
            return _fail(ErrorCode.NOT_FOUND, str(error))

    async def _put(self, request: Request, collection: str, name: str) -> Response:
        assert self.writer is not None
        body = parse_text(request.body, as_json=True)
        if not isinstance(body, dict):
            raise ConfigError([f"{collection}.{name}: the body must be a JSON object"])
        slot = body.pop("slot", None) if collection == "plugins" else None
        stored = await self.writer.put(EntryKey(collection, name, slot), body)
        named = {"name": name} if collection != "destinations" else {}
        return _json(redact({**({"slot": slot} if slot else {}), **named, **stored}))

    async def _delete(self, request: Request, collection: str, name: str) -> None:
        assert self.writer is not None
        slot = _query(request).get("slot") if collection == "plugins" else None
        if collection == "plugins" and slot is None:
            slot = await self._plugin_slot(name)
        await self.writer.delete(EntryKey(collection, name, slot))

    async def _plugin_slot(self, name: str) -> str:
        """The one slot holding plugin `name`; two slots holding it need `?slot=`."""
        assert self.writer is not None
        slots = plugin_slots_named(await self.writer.stored_document(), name)
        if not slots:
            raise EntryMissing(f"no plugin instance named {name!r}")
        if len(slots) > 1:
            raise ConfigError([f"plugins.{name}: held by slots {', '.join(slots)}; name one with ?slot="])
        return slots[0]

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
        return _json({"valid": False, **_invalid(problems)}, 400)

    async def _destinations(self, request: Request) -> Response:
        destinations = self.runtime.state.config.destinations
        return _json(
            {
                "data": [
                    {"name": name, **public_view(destination), "outlier": self.runtime.outliers.view(name)}
                    for name, destination in destinations.items()
                ]
            }
        )

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
            rows += [
                {"slot": slot, "name": instance.name, "kind": instance.kind, "status": "configured"}
                for instance in getattr(plugins, slot)
            ]
        return rows

    async def _plugin_health(self, request: Request) -> Response:
        rows = self._plugin_rows()
        return _json({"total": len(rows), "healthy": len(rows), "unhealthy": 0, "plugins": rows})

    async def _plugins(self, request: Request) -> Response:
        return _json({"data": []})

    async def _wasm_disabled(self, request: Request) -> Response:
        return _fail(ErrorCode.WASM_PLUGINS_DISABLED, "WASM plugins are disabled")

    async def _usage(self, request: Request) -> Response:
        state = self.runtime.state
        return await _answer(usage.query_usage(state.config, state.stages, _query(request)))

    async def _guardrails(self, request: Request) -> Response:
        state = self.runtime.state
        return await _answer(policy.effective_bundle(state.config, state.stages, _query(request)))

    async def _pricing(self, request: Request) -> Response:
        state = self.runtime.state
        return await _answer(pricing.resolve_price(state.config, state.pricer, _query(request)))
