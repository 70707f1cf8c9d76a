"""MemoryStore, Memory (the current content at a path) and MemoryVersion (every change, kept after delete)."""

from __future__ import annotations

from django.db import models

from registry.core.ids import public_id_field
from registry.core.models import ArchivableResource


class MemoryStore(ArchivableResource):
    id = public_id_field("mems")
    name = models.CharField(max_length=255)
    description = models.TextField(blank=True, default="")
    metadata = models.JSONField(default=dict)

    class Meta:
        indexes = [models.Index(fields=["workspace", "created_at", "id"], name="memory_store_list_idx")]


class Memory(models.Model):
    """A live memory; its path is unique within the store."""

    id = public_id_field("mem")
    store = models.ForeignKey(MemoryStore, on_delete=models.CASCADE, related_name="memories")
    path = models.CharField(max_length=1024)
    content = models.TextField()
    content_sha256 = models.CharField(max_length=64)
    content_size_bytes = models.PositiveIntegerField()
    version_id = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["store", "path"], name="memory_path_unique")]

    def __str__(self) -> str:
        return f"{self.store_id}:{self.path}"


class MemoryVersion(models.Model):
    """One change of a memory. Redaction clears its content and path but keeps the record."""

    class Operation(models.TextChoices):
        CREATED = "created"
        MODIFIED = "modified"
        DELETED = "deleted"

    id = public_id_field("memver")
    store = models.ForeignKey(MemoryStore, on_delete=models.CASCADE, related_name="versions")
    memory_id = models.CharField(max_length=64, db_index=True)
    operation = models.CharField(max_length=16, choices=Operation.choices)
    path = models.CharField(max_length=1024, null=True, blank=True)
    content = models.TextField(null=True, blank=True)
    content_sha256 = models.CharField(max_length=64, null=True, blank=True)
    content_size_bytes = models.PositiveIntegerField(null=True, blank=True)
    created_by = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)
    redacted_at = models.DateTimeField(null=True, blank=True)
    redacted_by = models.JSONField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["store", "created_at", "id"], name="memory_version_list_idx")]

    def __str__(self) -> str:
        return f"{self.memory_id} {self.operation} ({self.id})"
