"""Who a model call belongs to, in a form the gateway verifies: a short-lived JWT the registry signs.

Every model call of a session carries `Authorization: Bearer <JWT>` (ES256, `kid` of a key published at
`/.well-known/jwks.json`) with the claims `workspace` and `session` (also `iss`, `aud`, `sub`, `iat`,
`exp`, `jti`). A gateway's `jwt` validator fetches that JWKS and maps the claims to scope dimensions,
so its per-workspace limits and budgets, usage records and per-session policy bundles apply.
`REGISTRY_MODEL_AUTH=api_key` sends the static `REGISTRY_MODEL_API_KEY` instead.
"""

from __future__ import annotations

import secrets
import threading
import time

import jwt
from django.conf import settings

from registry.internal.selectors import signing_private_key
from registry.internal.services import signing_key_ensure

# A cached token is replaced once this share of its lifetime has passed.
RENEW_AFTER = 0.8


class ModelCallIdentity:
    """Mints and caches the per-session tokens of one worker."""

    def __init__(self) -> None:
        self._tokens: dict[str, tuple[float, str]] = {}
        self._lock = threading.Lock()
        self._key: tuple[str, str] | None = None

    def headers(self, *, workspace_id: str, session_id: str) -> dict[str, str]:
        """The `authorization` header of a model call made for this session."""
        if settings.REGISTRY_MODEL_AUTH != "jwt":
            key = settings.REGISTRY_MODEL_API_KEY
            return {"authorization": f"Bearer {key}"} if key else {}
        return {"authorization": f"Bearer {self.token(workspace_id=workspace_id, session_id=session_id)}"}

    def token(self, *, workspace_id: str, session_id: str) -> str:
        now = time.time()
        with self._lock:
            cached = self._tokens.get(session_id)
            if cached is not None and cached[0] > now:
                return cached[1]
        lifetime = settings.REGISTRY_RUNTIME_TOKEN_SECONDS
        kid, private_pem = self._signing_key()
        claims = {
            "iss": settings.REGISTRY_RUNTIME_TOKEN_ISSUER,
            "aud": settings.REGISTRY_RUNTIME_TOKEN_AUDIENCE,
            "sub": session_id,
            "workspace": workspace_id,
            "session": session_id,
            "iat": int(now),
            "exp": int(now + lifetime),
            "jti": secrets.token_hex(8),
        }
        token = jwt.encode(claims, private_pem, algorithm="ES256", headers={"kid": kid})
        with self._lock:
            self._tokens[session_id] = (now + lifetime * RENEW_AFTER, token)
        return token

    def forget(self, session_id: str) -> None:
        with self._lock:
            self._tokens.pop(session_id, None)

    def _signing_key(self) -> tuple[str, str]:
        """The current key, read on every new token (one query), so a rotated or retired key is not used."""
        key = signing_key_ensure()
        if self._key is None or self._key[0] != key.kid:
            self._key = (key.kid, signing_private_key(key))
        return self._key
