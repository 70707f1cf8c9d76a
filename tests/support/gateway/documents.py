"""Gateway config documents for tests, built from one place that knows their shape: vaults, destinations (model
and MCP upstreams), fallback routes, and the common documents (one destination behind one route; chat-shaped
`a-*` and messages-shaped `b-*` models on two providers; an MCP route added to either)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

# The `keys` env vault: credential `a` is VAULT__KEYS__A (set with `thread.vault_keys`).
KEYS_VAULT = {"name": "keys", "resolver": "env"}


def path_vault(name: str = "v") -> dict[str, Any]:
    """An env vault whose every credential is $PATH (always set): for destinations whose key does not matter."""
    return {"name": name, "resolver": "env", "env_var": "PATH"}


def file_vault(file: str | Path, name: str = "files") -> dict[str, Any]:
    """A `static_file` vault reading `file` (relative paths resolve from the document's base directory)."""
    return {"name": name, "resolver": "static_file", "file": str(file)}


def static_vault(directory: Path, secrets: dict[str, str], name: str = "keys") -> dict[str, Any]:
    """A `static_file` vault holding `secrets` (credential id to key), written as `vault.yaml` in `directory`."""
    path = directory / "vault.yaml"
    path.write_text(yaml.safe_dump(secrets))
    return file_vault(path, name)


def credentials(vault: str, credential_id: str | None = None) -> dict[str, str]:
    """Where an upstream's key is: `credential_id` in `vault`, or the vault's default."""
    return {"vault": vault, **({"credential_id": credential_id} if credential_id else {})}


def destination(
    kind: str, base_url: str, vault: str = "v", credential_id: str | None = None, **extra: Any
) -> dict[str, Any]:
    """A destination of `kind` at `base_url` whose key is `credential_id` (or the vault's default) in `vault`."""
    credentials = {"vault": vault, **({"credential_id": credential_id} if credential_id else {})}
    return {"kind": kind, "base_url": base_url, "credentials": credentials, **extra}


def mcp_destination(url: str, vault: str, credential_id: str | None = None, **extra: Any) -> dict[str, Any]:
    """An MCP upstream at `url` whose token is `credential_id` (or the vault's default) in `vault`."""
    return {"kind": "mcp", "url": url, "credentials": credentials(vault, credential_id), **extra}


def keyed_destination(kind: str, base_url: str, credential_id: str, **extra: Any) -> dict[str, Any]:
    """A destination of `kind` at `base_url` whose key is `credential_id` in the `keys` env vault (KEYS_VAULT)."""
    return destination(kind, base_url, "keys", credential_id, **extra)


def fallback_route(
    name: str,
    match: str | dict[str, Any] | None,
    *destinations: str,
    strategy: dict[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A route trying `destinations` in order (`strategy`: more fields of its strategy, e.g. `retry`); `match` is a
    model glob, a whole match block, or None (no match: every request); `extra` are more fields of the route."""
    matched = {} if match is None else {"match": {"model": match} if isinstance(match, str) else match}
    targets = [{"destination": name} for name in destinations]
    return {"name": name, **matched, "strategy": {"mode": "fallback", "targets": targets, **(strategy or {})}, **extra}


def with_mcp_route(document: dict[str, Any], url: str, vault: str, credential_id: str | None = None) -> dict[str, Any]:
    """`document` with the MCP destination `notes` at `url` and, tried first, the route `mcp` of `/v1/mcp` to it."""
    document["destinations"]["notes"] = mcp_destination(url, vault, credential_id)
    document["routes"].insert(0, fallback_route("mcp", {"path": "/v1/mcp"}, "notes"))
    return document


def one_destination(
    upstream: dict[str, Any],
    *,
    name: str = "one",
    vault: str | dict[str, Any] = "v",
    match: str | dict[str, Any] | None = None,
    **sections: Any,
) -> dict[str, Any]:
    """`upstream` as destination `name` behind one route `all` (`match`: of some requests only), plus `sections`;
    its key is in `vault`: a vault section, or the name of a $PATH vault (`path_vault`)."""
    return {
        "vaults": [path_vault(vault) if isinstance(vault, str) else vault],
        "destinations": {name: upstream},
        "routes": [fallback_route("all", match, name)],
        **sections,
    }


def two_shapes(
    primary_url: str,
    secondary_url: str,
    *,
    vault: dict[str, Any] = KEYS_VAULT,
    shape_b: dict[str, Any] | None = None,
    **sections: Any,
) -> dict[str, Any]:
    """Models `a-*` to `shape_a`, chat-shaped at `primary_url`; `b-*` to `shape_b`, messages-shaped at
    `secondary_url` (with `shape_b` as more destination fields); keys `a` and `b` of `vault` (named `keys`:
    the env vault by default, or `static_vault`); plus `sections`."""
    return {
        "vaults": [vault],
        "destinations": {
            "shape_a": keyed_destination("vendor_a", f"{primary_url}/v1", "a"),
            "shape_b": keyed_destination("vendor_b", secondary_url, "b", **(shape_b or {})),
        },
        "routes": [fallback_route("to_a", "a-*", "shape_a"), fallback_route("to_b", "b-*", "shape_b")],
        **sections,
    }
