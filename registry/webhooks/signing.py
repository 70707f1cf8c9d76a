"""Webhook signing secrets: `whsec_` + base64 of 32 random bytes (the Standard Webhooks form that
`standardwebhooks.Webhook(secret)` and the reference client's `webhooks.unwrap` take), sealed at rest under
the endpoint's id and unsealed only for signing (`signing_secret`)."""

from __future__ import annotations

import base64
import secrets

from registry.core.secrets import seal, unseal
from registry.webhooks.models import WebhookEndpoint

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32


def new_signing_secret() -> str:
    """A fresh secret from the CSPRNG."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def seal_context(endpoint_id: str) -> str:
    """The associated data a secret is sealed with: a sealed secret moved to another row does not open."""
    return f"webhook-endpoint:{endpoint_id}"


def sealed_signing_secret(secret: str, *, endpoint_id: str) -> str:
    """`secret` sealed for the endpoint `endpoint_id` (what `signing_secret_sealed` holds)."""
    return seal(secret, context=seal_context(endpoint_id))


def signing_secret(endpoint: WebhookEndpoint) -> str:
    """The endpoint's current `whsec_` secret in clear, for signing a delivery; never for a response or a log."""
    return unseal(endpoint.signing_secret_sealed, context=seal_context(endpoint.pk))
