"""Where a `native_api_key` destination's credential goes: the `auth` object, read once at validation."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

AUTH_KEYS = frozenset({"type", "header", "prefix"})
AUTH_TYPES = ("bearer", "header")


@dataclass(frozen=True)
class AuthPlacement:
    """A credential sent as `<header>: <prefix><token>`.

    `{type: bearer}` is `Authorization: Bearer <token>`; `{header: x-api-key}` (type `header`) sends the bare
    token in that header unless a `prefix` is given.
    """

    header: bytes
    prefix: bytes

    @classmethod
    def parse(cls, auth: Mapping[str, Any]) -> AuthPlacement:
        """The placement an `auth` object describes; raises ValueError naming what is wrong."""
        unknown = sorted(set(auth) - AUTH_KEYS)
        if unknown:
            raise ValueError(f"unknown keys {unknown}; use {sorted(AUTH_KEYS)}")
        kind = auth.get("type", "header" if "header" in auth else "bearer")
        if kind not in AUTH_TYPES:
            raise ValueError(f"`type` is one of {list(AUTH_TYPES)}, not {kind!r}")
        header = auth.get("header", "authorization")
        prefix = auth.get("prefix", "Bearer " if kind == "bearer" else "")
        if not isinstance(header, str) or not header or not isinstance(prefix, str):
            raise ValueError("`header` must be a nonempty string and `prefix` a string")
        return cls(header.lower().encode(), prefix.encode())

    def headers(self, token: str) -> list[tuple[bytes, bytes]]:
        """The credential header of a request."""
        return [(self.header, self.prefix + token.encode())]
