"""Expansion of the deprecated `legacy_mcp_gateway` document (the earlier MCP gateway's YAML) into the
current sections, before validation.

The earlier format::

    legacy_mcp_gateway:
      listen: 0.0.0.0:8080            # -> server.listen
      admin_listen: 127.0.0.1:9099    # -> server.admin_listen
      auth:                           # optional; without it clients are not authenticated
        api_keys_file: keys.yaml      # -> an `api_key` validator
        jwt: {issuer, audience, jwks_url | public_key_file, claims: {claim: scope dim}}  # -> a `jwt` validator
      servers:
        - name: docs                  # -> destination `docs` (kind mcp)
          url: https://host/mcp       # -> its base_url
          token_env: DOCS_TOKEN       # -> vault `legacy_docs` (env resolver reading DOCS_TOKEN)

The first server serves every MCP request; a client reaches another one with an `x-mcp-server: <name>`
header (one route per server). Server keys the current gateway cannot honour (tool filters among them) are
refused rather than dropped, so no restriction silently disappears.
"""

from __future__ import annotations

from typing import Any

DEPRECATION = "legacy_mcp_gateway is deprecated; move its servers to destinations and routes"
SERVER_HEADER = "x-mcp-server"
MCP_PATH = "/v1/mcp"
_KNOWN_KEYS = {"listen", "admin_listen", "auth", "servers"}
_SERVER_KEYS = {"name", "url", "token_env"}
_JWT_KEYS = {"issuer", "audience", "jwks_url", "public_key_file", "claims"}
_KEY = "legacy_mcp_gateway"


class LegacyFormatError(ValueError):
    """The legacy document cannot be expanded."""


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    return [str(item) for item in value] if isinstance(value, list) else [str(value)]


def _refuse_unknown(key: str, section: dict[str, Any], known: set[str]) -> None:
    unknown = sorted(set(section) - known)
    if unknown:
        raise LegacyFormatError(
            f"{key}.{unknown[0]}: has no equivalent in the current gateway; configure it in the current format instead"
        )


def _jwt_validator(jwt: Any) -> dict[str, Any]:
    if not isinstance(jwt, dict):
        raise LegacyFormatError(f"{_KEY}.auth.jwt: must be a mapping")
    _refuse_unknown(f"{_KEY}.auth.jwt", jwt, _JWT_KEYS)
    validator: dict[str, Any] = {
        "name": "legacy_jwt",
        "kind": "jwt",
        "issuers": _as_list(jwt.get("issuer")),
        "audiences": _as_list(jwt.get("audience")),
    }
    if jwt.get("jwks_url"):
        validator["jwks_url"] = jwt["jwks_url"]
    if jwt.get("public_key_file"):
        validator["static_public_key_pem"] = jwt["public_key_file"]
    if jwt.get("claims"):
        validator["scope_from"] = {"jwt_claims": jwt["claims"]}
    return validator


def _identity(auth: Any) -> dict[str, Any]:
    if auth is None:
        return {}
    if not isinstance(auth, dict):
        raise LegacyFormatError(f"{_KEY}.auth: must be a mapping")
    _refuse_unknown(f"{_KEY}.auth", auth, {"api_keys_file", "jwt"})
    validators = []
    if auth.get("api_keys_file"):
        validators.append({"name": "legacy_api_keys", "kind": "api_key", "keys_file": auth["api_keys_file"]})
    if auth.get("jwt") is not None:
        validators.append(_jwt_validator(auth["jwt"]))
    scope_dims = sorted(
        {dim for validator in validators for dim in validator.get("scope_from", {}).get("jwt_claims", {}).values()}
    )
    return {"identity": {"scope_dims": scope_dims, "validators": validators}}


def _server_sections(server: Any, index: int) -> tuple[str, dict, dict]:
    key = f"{_KEY}.servers[{index}]"
    if not isinstance(server, dict) or not server.get("name") or not server.get("url"):
        raise LegacyFormatError(f"{key}: needs `name` and `url`")
    _refuse_unknown(key, server, _SERVER_KEYS)
    name = str(server["name"])
    vault: dict[str, Any] = {"name": f"legacy_{name}", "resolver": "env"}
    if server.get("token_env"):
        vault["env_var"] = str(server["token_env"])
    destination = {"kind": "mcp", "base_url": str(server["url"]), "credentials": {"vault": vault["name"]}}
    return name, destination, vault


def _route(name: str, header: dict[str, str]) -> dict[str, Any]:
    return {
        "name": f"legacy_mcp_{name}" if header else "legacy_mcp",
        "match": {"path": MCP_PATH, "header": header},
        "strategy": {"mode": "fallback", "targets": [{"destination": name}]},
    }


def expand_legacy(legacy: Any) -> tuple[dict[str, Any], list[str]]:
    """The current-format document equivalent to `legacy`, and the warnings its expansion raises."""
    if not isinstance(legacy, dict) or not isinstance(legacy.get("servers"), list) or not legacy["servers"]:
        raise LegacyFormatError(f"{_KEY}: needs a nonempty `servers` list")
    warnings = [DEPRECATION]
    ignored = sorted(set(legacy) - _KNOWN_KEYS)
    if ignored:
        warnings.append(f"{_KEY}: keys without an equivalent are ignored: {ignored}")
    destinations, vaults = {}, []
    for index, server in enumerate(legacy["servers"]):
        name, destination, vault = _server_sections(server, index)
        destinations[name] = destination
        vaults.append(vault)
    routes = [_route(name, {SERVER_HEADER: name}) for name in destinations]
    routes.append(_route(next(iter(destinations)), {}))
    server_section = {key: legacy[key] for key in ("listen", "admin_listen") if key in legacy}
    document = {
        "server": server_section,
        **_identity(legacy.get("auth")),
        "destinations": destinations,
        "vaults": vaults,
        "routes": routes,
    }
    return document, warnings
