"""Environment: a named sandbox template with its `config` (cloud or self_hosted)."""

from __future__ import annotations

from django.db import models

from registry.core.ids import public_id_field
from registry.core.models import ArchivableResource


class Environment(ArchivableResource):
    id = public_id_field("env")
    name = models.CharField(max_length=256)
    description = models.TextField(null=True, blank=True)
    metadata = models.JSONField(default=dict)
    config = models.JSONField()
    scope = models.CharField(max_length=32, default="organization")
