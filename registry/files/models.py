"""File: the metadata of one upload; its bytes are an object of the default storage."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from registry.core.ids import public_id_field
from registry.core.models import WorkspaceResource


class File(WorkspaceResource):
    """An uploaded file. `storage_name` names its bytes in `storages["default"]`, never shown by the API."""

    id = public_id_field("file")
    filename = models.CharField(max_length=255)
    mime_type = models.CharField(max_length=255)
    size_bytes = models.BigIntegerField()
    storage_name = models.CharField(max_length=1024)
    expires_at = models.DateTimeField(null=True, blank=True)

    title_field = "filename"

    @property
    def expired(self) -> bool:
        return self.expires_at is not None and self.expires_at <= timezone.now()
