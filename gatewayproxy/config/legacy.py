"""Expansion of the deprecated `legacy_mcp_gateway` document into the current sections.

The earlier service's YAML is `{listen?, admin_listen?, servers: [{name, url, token_env?}]}`; every
server becomes an `mcp` destination with an `env` vault, all behind one fallback route on `/v1/mcp`.
"""

from __future__ import annotations

from typing import Any

DEPRECATION = "legacy_mcp_gateway is deprecated; move its servers to destinations and routes"
_KNOWN_KEYS = {"listen", "admin_listen", "servers"}


class LegacyFormatError(ValueError):
    """The legacy document cannot be expanded."""


def _server_sections(server: Any, index: int) -> tuple[str, dict, dict]:
    if not isinstance(server, dict) or not server.get("name") or not server.get("url"):
        raise LegacyFormatError(f"legacy_mcp_gateway.servers[{index}]: needs `name` and `url`")
    name = str(server["name"])
    vault: dict[str, Any] = {"name": f"legacy_{name}", "resolver": "env"}
    if server.get("token_env"):
        vault["env_var"] = str(server["token_env"])
    destination = {"kind": "mcp", "base_url": str(server["url"]), "credentials": {"vault": vault["name"]}}
    return name, destination, vault


def expand_legacy(legacy: Any) -> tuple[dict[str, Any], list[str]]:
    """The current-format document equivalent to `legacy`, and the warnings its expansion raises."""
    if not isinstance(legacy, dict) or not isinstance(legacy.get("servers"), list) or not legacy["servers"]:
        raise LegacyFormatError("legacy_mcp_gateway: needs a nonempty `servers` list")
    warnings = [DEPRECATION]
    ignored = sorted(set(legacy) - _KNOWN_KEYS)
    if ignored:
        warnings.append(f"legacy_mcp_gateway: keys without an equivalent are ignored: {ignored}")
    destinations, vaults = {}, []
    for index, server in enumerate(legacy["servers"]):
        name, destination, vault = _server_sections(server, index)
        destinations[name] = destination
        vaults.append(vault)
    route = {"name": "legacy_mcp", "match": {"path": "/v1/mcp"},
             "strategy": {"mode": "fallback", "targets": [{"destination": name} for name in destinations]}}
    server_section = {key: legacy[key] for key in ("listen", "admin_listen") if key in legacy}
    document = {"server": server_section, "destinations": destinations, "vaults": vaults, "routes": [route]}
    return document, warnings
