"""Reads for workspaces: resolving credentials to a workspace."""

from __future__ import annotations

from registry.workspaces.models import ApiKey, OidcMembership
from registry.workspaces.services import digest_of


def api_key_for_plaintext(plaintext: str) -> ApiKey | None:
    """The live (unrevoked) key with this plaintext, or None."""
    return (
        ApiKey.objects.select_related("workspace").filter(digest=digest_of(plaintext), revoked_at__isnull=True).first()
    )


def membership_for_subject(subject: str) -> OidcMembership | None:
    return OidcMembership.objects.select_related("workspace").filter(subject=subject).first()
