"""Writes for vaults and credentials. Secret fields are sealed on the way in and never stored in clear.

A credential's validated `auth` is split in two: its public fields (returned by the API) and its
secrets (`token`, `access_token`, `refresh_token`, `client_secret`, `secret_value`), each sealed
with AES-GCM bound to the credential id and the field's path.

Creating, archiving and deleting a vault or a credential write their webhook event (`vault.*`,
`vault_credential.*`) in their transaction; so does a failed refresh of a credential's access token.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import httpx
from django.db import transaction
from django.utils import timezone

from registry.core.egress import check_url
from registry.core.errors import invalid_request
from registry.core.ids import new_id
from registry.core.secrets import seal, unseal
from registry.core.services import apply_updates, resource_archive
from registry.vaults.models import Vault, VaultCredential
from registry.webhooks import outbox
from registry.workspaces.models import Workspace

SECRET_FIELDS = frozenset({"token", "access_token", "refresh_token", "client_secret", "secret_value"})
REFRESH_TIMEOUT_SECONDS = 10
IMMUTABLE_AUTH_FIELDS = ("mcp_server_url", "secret_name")


def split_secrets(auth: dict[str, Any], credential_id: str, prefix: str = "") -> tuple[dict[str, Any], dict[str, str]]:
    """(public fields, sealed secrets by dotted path) of a validated `auth` object."""
    public: dict[str, Any] = {}
    sealed: dict[str, str] = {}
    for key, value in auth.items():
        path = f"{prefix}{key}"
        if key in SECRET_FIELDS:
            sealed[path] = seal(str(value), context=f"{credential_id}:{path}")
        elif isinstance(value, dict):
            public[key], inner = split_secrets(value, credential_id, f"{path}.")
            sealed.update(inner)
        else:
            public[key] = value.isoformat() if isinstance(value, datetime) else value
    return public, sealed


def secret_of(credential: VaultCredential, path: str) -> str | None:
    """The plaintext of one secret field, for the runtime's use only."""
    sealed = credential.sealed.get(path)
    return None if sealed is None else unseal(sealed, context=f"{credential.id}:{path}")


@transaction.atomic
def vault_create(*, workspace: Workspace, values: dict[str, Any]) -> Vault:
    vault = Vault.objects.create(
        workspace=workspace, display_name=values["display_name"], metadata=values.get("metadata", {})
    )
    outbox.emit("vault.created", workspace_id=workspace.pk, object_id=vault.pk)
    return vault


@transaction.atomic
def vault_update(*, vault: Vault, values: dict[str, Any]) -> Vault:
    locked = Vault.objects.select_for_update().get(pk=vault.pk)
    apply_updates(locked, values, ("display_name",))
    locked.save()
    return locked


@transaction.atomic
def vault_archive(*, vault: Vault) -> Vault:
    """Archive once (archiving an archived vault answers it again); it takes no new credentials."""
    locked = Vault.objects.select_for_update().get(pk=vault.pk)
    if locked.archived_at is None:
        resource_archive(instance=locked)
        outbox.emit("vault.archived", workspace_id=locked.workspace_id, object_id=locked.pk)
    return locked


@transaction.atomic
def vault_delete(*, vault: Vault) -> None:
    """Delete the vault with its credentials: each credential's deletion is an event of its own too."""
    vault_id, workspace_id = vault.pk, vault.workspace_id
    credential_ids = list(VaultCredential.objects.filter(vault_id=vault_id).values_list("pk", flat=True))
    vault.delete()
    for credential_id in credential_ids:
        outbox.emit("vault_credential.deleted", workspace_id=workspace_id, object_id=credential_id, vault_id=vault_id)
    outbox.emit("vault.deleted", workspace_id=workspace_id, object_id=vault_id)


@transaction.atomic
def credential_create(*, vault: Vault, values: dict[str, Any]) -> VaultCredential:
    if vault.archived_at is not None:
        raise invalid_request(f"Vault {vault.id} is archived; it takes no new credentials.")
    credential_id = new_id("vcrd")
    public, sealed = split_secrets(values["auth"], credential_id)
    credential = VaultCredential.objects.create(
        id=credential_id,
        workspace_id=vault.workspace_id,
        vault=vault,
        display_name=values.get("display_name"),
        metadata=values.get("metadata", {}),
        auth=public,
        sealed=sealed,
    )
    _emit(credential, "vault_credential.created")
    return credential


@transaction.atomic
def credential_update(*, credential: VaultCredential, values: dict[str, Any]) -> VaultCredential:
    locked = VaultCredential.objects.select_for_update().get(pk=credential.pk)
    if "auth" in values:
        if values["auth"]["type"] != locked.auth["type"]:
            raise invalid_request(f"auth.type: a {locked.auth['type']} credential cannot become another type.")
        _merge_auth(locked, values["auth"])
    apply_updates(locked, values, ("display_name",))
    locked.save()
    return locked


@transaction.atomic
def credential_archive(*, credential: VaultCredential) -> VaultCredential:
    """Archive once (archiving an archived credential answers it again)."""
    locked = VaultCredential.objects.select_for_update().get(pk=credential.pk)
    if locked.archived_at is None:
        resource_archive(instance=locked)
        _emit(locked, "vault_credential.archived")
    return locked


@transaction.atomic
def credential_delete(*, credential: VaultCredential) -> None:
    """Delete one credential of its vault."""
    credential_id, workspace_id, vault_id = credential.pk, credential.workspace_id, credential.vault_id
    credential.delete()
    outbox.emit("vault_credential.deleted", workspace_id=workspace_id, object_id=credential_id, vault_id=vault_id)


def _emit(credential: VaultCredential, event_type: str) -> None:
    outbox.emit(event_type, workspace_id=credential.workspace_id, object_id=credential.pk, vault_id=credential.vault_id)


def _merge_auth(credential: VaultCredential, update: dict[str, Any]) -> None:
    """Apply an update shape to the stored auth: given fields replace, nested objects merge, null keeps."""
    for immutable in IMMUTABLE_AUTH_FIELDS:
        if immutable in update and update[immutable] != credential.auth.get(immutable):
            raise invalid_request(f"auth.{immutable}: is immutable; create a new credential to change it.")
    endpoint_auth = (credential.auth.get("refresh") or {}).get("token_endpoint_auth") or {}
    refresh_update = update.get("refresh") or {}
    if "token_endpoint_auth" in refresh_update:
        if endpoint_auth.get("type") not in ("client_secret_basic", "client_secret_post"):
            raise invalid_request("auth.refresh.token_endpoint_auth: this credential's token endpoint takes no secret.")
        # The credential keeps its current method even when the update names the other one.
        refresh_update["token_endpoint_auth"]["type"] = endpoint_auth["type"]
    if update.get("refresh") and not credential.auth.get("refresh"):
        raise invalid_request("auth.refresh: this credential has no refresh settings to update.")
    public, sealed = split_secrets(_without_nulls(update), credential.id)
    credential.auth = _merged(credential.auth, public)
    credential.sealed = {**credential.sealed, **sealed}
    location = credential.auth.get("injection_location")
    if location is not None and not any(location.values()):
        raise invalid_request("auth.injection_location: at least one of body and header must stay enabled.")


def _without_nulls(values: dict[str, Any]) -> dict[str, Any]:
    return {
        key: _without_nulls(value) if isinstance(value, dict) else value
        for key, value in values.items()
        if value is not None
    }


def _merged(stored: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    merged = dict(stored)
    for key, value in update.items():
        merged[key] = (
            _merged(stored[key], value) if isinstance(value, dict) and isinstance(stored.get(key), dict) else value
        )
    return merged


@transaction.atomic
def credential_refresh_oauth(*, credential: VaultCredential) -> VaultCredential:
    """Exchange an `mcp_oauth` credential's refresh token for a new access token (RFC 6749 section 6)."""
    locked = VaultCredential.objects.select_for_update().get(pk=credential.pk)
    refresh = locked.auth.get("refresh") or {}
    refresh_token = secret_of(locked, "refresh.refresh_token")
    if not refresh or refresh_token is None:
        raise invalid_request("This credential has no refresh settings.")
    form = {"grant_type": "refresh_token", "refresh_token": refresh_token, "client_id": refresh["client_id"]}
    form.update({key: refresh[key] for key in ("scope", "resource") if refresh.get(key)})
    method = refresh["token_endpoint_auth"]["type"]
    client_secret = secret_of(locked, "refresh.token_endpoint_auth.client_secret")
    basic = (refresh["client_id"], client_secret or "") if method == "client_secret_basic" else None
    if method == "client_secret_post":
        form["client_secret"] = client_secret or ""
    check_url(refresh["token_endpoint"])  # a client-supplied URL: public addresses only
    response = httpx.post(refresh["token_endpoint"], data=form, auth=basic, timeout=REFRESH_TIMEOUT_SECONDS)
    response.raise_for_status()
    token = response.json()
    locked.sealed["access_token"] = seal(token["access_token"], context=f"{locked.id}:access_token")
    if token.get("refresh_token"):
        locked.sealed["refresh.refresh_token"] = seal(
            token["refresh_token"], context=f"{locked.id}:refresh.refresh_token"
        )
    if token.get("expires_in"):
        locked.auth["expires_at"] = (timezone.now() + timedelta(seconds=int(token["expires_in"]))).isoformat()
    locked.save(update_fields=["auth", "sealed", "updated_at"])
    return locked


@transaction.atomic
def credential_refresh_failed(*, credential: VaultCredential) -> None:
    """Record that refreshing the credential's access token failed (its refresh's own transaction was rolled
    back, so this is written in one of its own): the `vault_credential.refresh_failed` event."""
    _emit(credential, "vault_credential.refresh_failed")
