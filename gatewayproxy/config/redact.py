"""The config as the admin plane shows it: JSON-ready, with secrets and URL passwords redacted."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel

REDACTED = "[redacted]"
_SECRET_SUFFIXES = ("password", "secret", "_token", "api_key")
_SECRET_KEYS = frozenset({"auth", "authorization", "token", "credential_value"})
_URL_PASSWORD = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)(?P<user>[^:/@]*):[^@/]*@", re.IGNORECASE)


def _is_secret_key(key: str) -> bool:
    lowered = key.lower()
    if lowered.endswith("_file") or lowered.endswith("_path"):
        return False
    return lowered in _SECRET_KEYS or lowered.endswith(_SECRET_SUFFIXES)


def redact(value: Any) -> Any:
    """A copy of `value` with secret-named keys and URL passwords hidden."""
    if isinstance(value, dict):
        return {key: _redact_item(str(key), item) for key, item in value.items()}
    if isinstance(value, list):
        return [redact(item) for item in value]
    if isinstance(value, str):
        return _URL_PASSWORD.sub(rf"\g<scheme>\g<user>:{REDACTED}@", value)
    return value


def _redact_item(key: str, item: Any) -> Any:
    if _is_secret_key(key):
        return REDACTED
    if key == "headers" and isinstance(item, dict):
        # Header maps (native proxy) carry credentials in their values; other `headers` keys are settings.
        return {name: REDACTED if isinstance(value, str) else redact(value) for name, value in item.items()}
    return redact(item)


def public_view(model: BaseModel) -> Any:
    """A config model as redacted JSON-ready data."""
    return redact(model.model_dump(mode="json", by_alias=True, exclude_none=True))
