"""Reads for gateways: the session-scoped guardrail bundle (plain or as an ES256 JWS), and the JWKS that
verifies the runtime's model-call tokens."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import jwt
from django.conf import settings
from django.utils import timezone

from registry.core.secrets import unseal
from registry.core.serialization import timestamp
from registry.extensions.selectors import guardrail_objects, guardrails_for_workspace
from registry.internal.models import SigningKey
from registry.sessions.models import Session


def guardrail_bundle(session: Session) -> dict[str, Any]:
    """The guardrails in force for the session's workspace, with its stored guardrail state."""
    now = timezone.now()
    guardrails = guardrails_for_workspace(session.workspace_id)
    state = getattr(session, "guardrail_state", None)
    version = max((guardrail.updated_at for guardrail in guardrails), default=now)
    return {
        "type": "guardrail_bundle",
        "workspace_id": session.workspace_id,
        "session_id": session.id,
        "version": int(version.timestamp() * 1000),
        "issued_at": timestamp(now),
        "expires_at": timestamp(now + timedelta(seconds=settings.REGISTRY_BUNDLE_TTL_SECONDS)),
        "guardrails": guardrail_objects(guardrails),
        "state": state.state if state else {},
    }


def signed(bundle: dict[str, Any]) -> str | None:
    """The bundle as a compact ES256 JWS, or None when no signing key is configured."""
    key_file = settings.REGISTRY_BUNDLE_SIGNING_KEY_FILE
    if not key_file:
        return None
    headers = {"kid": settings.REGISTRY_BUNDLE_KEY_ID, "typ": "guardrail-bundle+jws"}
    return jwt.encode(bundle, Path(key_file).read_text(), algorithm="ES256", headers=headers)


def jwks_document() -> dict[str, Any]:
    """The public keys that verify the runtime's model-call tokens (`/.well-known/jwks.json`)."""
    return {"keys": [key.public_jwk for key in SigningKey.objects.filter(retired_at__isnull=True).order_by("kid")]}


def signing_private_key(key: SigningKey) -> str:
    """The PEM private key of a signing key, for the runtime's use only."""
    return unseal(key.sealed_private_key, context=f"signing-key:{key.kid}")
