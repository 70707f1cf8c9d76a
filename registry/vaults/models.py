"""Vault and VaultCredential. Secret fields are sealed (AES-GCM, registry.core.secrets) in `sealed`."""

from __future__ import annotations

from django.db import models

from registry.core.ids import public_id_field
from registry.core.models import ArchivableResource


class Vault(ArchivableResource):
    id = public_id_field("vlt")
    display_name = models.CharField(max_length=255)
    metadata = models.JSONField(default=dict)

    title_field = "display_name"


class VaultCredential(ArchivableResource):
    """A credential: `auth` holds its public fields, `sealed` its secrets (never returned)."""

    id = public_id_field("vcrd")
    vault = models.ForeignKey(Vault, on_delete=models.CASCADE, related_name="credentials")
    display_name = models.CharField(max_length=255, null=True, blank=True)
    metadata = models.JSONField(default=dict)
    auth = models.JSONField(help_text="Public fields of the credential (type, server URL, expiry, ...).")
    sealed = models.JSONField(default=dict, help_text="Secret fields, each sealed with AES-GCM.")

    class Meta:
        indexes = [models.Index(fields=["vault", "created_at", "id"], name="vault_credential_list_idx")]

    def __str__(self) -> str:
        return f"{self.display_name or self.auth.get('type')} ({self.id})"
