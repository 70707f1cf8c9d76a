"""Gateway callers for tests: three API keys with their principals and scopes, as an identity config."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import yaml

CALLERS = {"key-alice": ("alice", {"team": "red"}), "key-bob": ("bob", {"team": "blue"}), "key-carol": ("carol", {})}


def write_identity(directory: Path) -> dict[str, Any]:
    """The api_key validator of the three callers, with its keys file under `directory`."""
    keys = [
        {"sha256": hashlib.sha256(key.encode()).hexdigest(), "principal": principal, "scope": scope}
        for key, (principal, scope) in CALLERS.items()
    ]
    (directory / "keys.yaml").write_text(yaml.safe_dump({"keys": keys}))
    return {
        "scope_dims": ["team"],
        "validators": [{"name": "keys", "kind": "api_key", "keys_file": str(directory / "keys.yaml")}],
    }
