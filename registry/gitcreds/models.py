"""GitCredential: a host, a username and a sealed token."""

from __future__ import annotations

from django.db import models

from registry.core.ids import public_id_field
from registry.core.models import ArchivableResource


class GitCredential(ArchivableResource):
    id = public_id_field("gitcred")
    display_name = models.CharField(max_length=255, null=True, blank=True)
    host = models.CharField(max_length=253)
    username = models.CharField(max_length=255)
    sealed_token = models.TextField()
    metadata = models.JSONField(default=dict)

    class Meta:
        indexes = [models.Index(fields=["workspace", "created_at", "id"], name="gitcred_list_idx")]

    def __str__(self) -> str:
        return f"{self.display_name or self.host} ({self.id})"
