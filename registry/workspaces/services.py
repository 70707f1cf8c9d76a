"""Writes for workspaces: create, issue and revoke keys, map OIDC subjects (and remove a mapping)."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from registry.workspaces.models import ApiKey, OidcMembership, Workspace

KEY_PREFIX = "sk-reg-"
# digest -> (monotonic expiry, key): API keys this process resolved lately (see selectors).
resolved_keys: dict[str, tuple[float, ApiKey]] = {}


def digest_of(plaintext_key: str) -> str:
    return hashlib.sha256(plaintext_key.encode()).hexdigest()


@dataclass(frozen=True)
class IssuedKey:
    """A freshly issued key: the row and the plaintext, which exists only in this object."""

    api_key: ApiKey
    plaintext: str


@transaction.atomic
def api_key_issue(*, workspace: Workspace, name: str = "", org_admin: bool = False) -> IssuedKey:
    plaintext = KEY_PREFIX + secrets.token_urlsafe(32)
    api_key = ApiKey.objects.create(
        workspace=workspace,
        name=name,
        digest=digest_of(plaintext),
        display_prefix=plaintext[:12],
        is_org_admin=org_admin,
    )
    return IssuedKey(api_key=api_key, plaintext=plaintext)


@transaction.atomic
def workspace_create(*, name: str) -> tuple[Workspace, IssuedKey]:
    workspace = Workspace.objects.create(name=name)
    return workspace, api_key_issue(workspace=workspace, name="default")


@transaction.atomic
def api_key_revoke(*, api_key: ApiKey) -> ApiKey:
    api_key.revoked_at = api_key.revoked_at or timezone.now()
    api_key.save(update_fields=["revoked_at"])
    forget_key(api_key)
    return api_key


def forget_key(api_key: ApiKey) -> None:
    """Drop a key from this process's cache of resolved keys (after a revocation)."""
    resolved_keys.pop(api_key.digest, None)


@transaction.atomic
def membership_set(*, workspace: Workspace, subject: str) -> OidcMembership:
    """Map `subject` to `workspace`; a subject belongs to one workspace, so this moves it."""
    membership, _ = OidcMembership.objects.update_or_create(subject=subject, defaults={"workspace": workspace})
    return membership


@transaction.atomic
def membership_delete(*, membership: OidcMembership) -> None:
    """Unmap a subject: its tokens authenticate no more."""
    OidcMembership.objects.filter(pk=membership.pk).delete()


# `last_used_at` is refreshed at most this often, so authentication costs no write per request.
LAST_USED_RESOLUTION = timedelta(seconds=60)


def api_key_mark_used(*, api_key: ApiKey) -> None:
    now = timezone.now()
    if api_key.last_used_at is None or now - api_key.last_used_at > LAST_USED_RESOLUTION:
        ApiKey.objects.filter(pk=api_key.pk).update(last_used_at=now)
        api_key.last_used_at = now
