"""Gateway callers for tests: `api_key` identity sections (client keys with their principals and scopes, in a
keys file) and the three callers most authorization tests use."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import yaml

Scope = dict[str, str]
CALLERS: dict[str, tuple[str, Scope]] = {
    "key-alice": ("alice", {"team": "red"}),
    "key-bob": ("bob", {"team": "blue"}),
    "key-carol": ("carol", {}),
}


def api_key_identity(
    directory: Path, callers: dict[str, tuple[str, Scope]], *, file: str = "keys.yaml", relative: bool = False
) -> dict[str, Any]:
    """An identity section whose `api_key` validator `keys` knows `callers` (client key to principal and scope),
    declaring the scopes' dimensions; the keys file is `file` under `directory`, named by its absolute path or,
    `relative`, by `file` alone (resolved from the document's base directory)."""
    keys = [
        {"sha256": hashlib.sha256(key.encode()).hexdigest(), "principal": principal, "scope": scope}
        for key, (principal, scope) in callers.items()
    ]
    (directory / file).write_text(yaml.safe_dump({"keys": keys}))
    dims = sorted({dim for _, scope in callers.values() for dim in scope})
    keys_file = file if relative else str(directory / file)
    return {"scope_dims": dims, "validators": [{"name": "keys", "kind": "api_key", "keys_file": keys_file}]}


def write_identity(directory: Path) -> dict[str, Any]:
    """The api_key validator of the three `CALLERS`, with its keys file under `directory`."""
    return api_key_identity(directory, CALLERS)
