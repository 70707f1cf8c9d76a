"""Reads for workspaces: resolving credentials to a workspace.

A resolved API key is remembered in this process for `REGISTRY_API_KEY_CACHE_SECONDS` (default 5),
which spares every request a query; a revocation takes effect at once in the process that made it
and within that many seconds everywhere else. Unknown keys are never remembered.
"""

from __future__ import annotations

import time

from django.conf import settings

from registry.workspaces.models import ApiKey, OidcMembership
from registry.workspaces.services import digest_of, resolved_keys


def api_key_for_plaintext(plaintext: str) -> ApiKey | None:
    """The live (unrevoked) key with this plaintext, or None."""
    digest = digest_of(plaintext)
    remembered = resolved_keys.get(digest)
    now = time.monotonic()
    if remembered is not None and remembered[0] > now:
        return remembered[1]
    api_key = ApiKey.objects.select_related("workspace").filter(digest=digest, revoked_at__isnull=True).first()
    if api_key is not None and settings.REGISTRY_API_KEY_CACHE_SECONDS > 0:
        resolved_keys[digest] = (now + settings.REGISTRY_API_KEY_CACHE_SECONDS, api_key)
    return api_key


def membership_for_subject(subject: str) -> OidcMembership | None:
    return OidcMembership.objects.select_related("workspace").filter(subject=subject).first()
