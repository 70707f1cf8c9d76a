"""Reads for vaults: the credentials of a vault, and the bearer token a session uses for an MCP server."""

from __future__ import annotations

from datetime import datetime

from django.db.models import QuerySet
from django.utils import timezone

from registry.core.errors import not_found
from registry.vaults.models import Vault, VaultCredential


def same_server(left: str, right: str) -> bool:
    return left.rstrip("/") == right.rstrip("/")


def mcp_credential_for(*, vault_ids: list[str], workspace_id: str, server_url: str) -> VaultCredential | None:
    """The first live MCP credential (in the session's vault order) for `server_url`."""
    candidates = VaultCredential.objects.filter(
        workspace_id=workspace_id,
        vault_id__in=vault_ids,
        archived_at__isnull=True,
        vault__archived_at__isnull=True,
        auth__type__in=("static_bearer", "mcp_oauth"),
    )
    matching = [credential for credential in candidates if same_server(credential.auth["mcp_server_url"], server_url)]
    matching.sort(key=lambda credential: vault_ids.index(credential.vault_id))
    return matching[0] if matching else None


def oauth_expired(credential: VaultCredential) -> bool:
    expires_at = credential.auth.get("expires_at")
    return bool(expires_at) and datetime.fromisoformat(expires_at) <= timezone.now()


def vault_credentials(*, vault: Vault, include_archived: bool) -> QuerySet[VaultCredential]:
    credentials = VaultCredential.objects.filter(vault=vault)
    return credentials if include_archived else credentials.filter(archived_at__isnull=True)


def credential_get(*, vault: Vault, credential_id: str) -> VaultCredential:
    credential = VaultCredential.objects.filter(vault=vault, pk=credential_id).first()
    if credential is None:
        raise not_found(f"Credential {credential_id} not found.")
    return credential


def environment_credentials(*, workspace_id: str, vault_ids: list[str]) -> list[VaultCredential]:
    """The live `environment_variable` credentials of the live vaults among `vault_ids`, in the order the
    vaults are named, then oldest first."""
    credentials = VaultCredential.objects.filter(
        workspace_id=workspace_id,
        vault_id__in=vault_ids,
        archived_at__isnull=True,
        vault__archived_at__isnull=True,
        auth__type="environment_variable",
    )
    return sorted(credentials, key=lambda credential: (vault_ids.index(credential.vault_id), credential.created_at))
