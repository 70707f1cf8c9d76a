"""Tables owned by registry.core: idempotency keys, and the abstract base of workspace resources."""

from __future__ import annotations

from typing import ClassVar

from django.db import models


class WorkspaceResource(models.Model):
    """Abstract base: a row that belongs to one workspace, listed by (created_at, id) through the index
    `<model>_list_idx` (unless its model names its own indexes), shown as its `title_field` and id."""

    title_field: ClassVar[str] = "name"

    workspace = models.ForeignKey("workspaces.Workspace", on_delete=models.CASCADE, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True, db_index=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True
        indexes = [models.Index(fields=["workspace", "created_at", "id"], name="%(class)s_list_idx")]

    def __str__(self) -> str:
        return f"{getattr(self, self.title_field)} ({self.pk})"


class ArchivableResource(WorkspaceResource):
    """Abstract base for resources with `archived_at`."""

    archived_at = models.DateTimeField(null=True, blank=True)

    class Meta(WorkspaceResource.Meta):
        abstract = True


class IdempotencyKey(models.Model):
    """One row per (workspace, key): claimed by a unique insert, then holding the first response."""

    class State(models.TextChoices):
        IN_PROGRESS = "in_progress"
        COMPLETE = "complete"

    workspace_id = models.CharField(max_length=64)
    key = models.CharField(max_length=255)
    fingerprint = models.CharField(max_length=64, help_text="SHA-256 of method, path and body.")
    state = models.CharField(max_length=16, choices=State.choices, default=State.IN_PROGRESS)
    response_status = models.PositiveSmallIntegerField(null=True)
    response_body = models.JSONField(null=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["workspace_id", "key"], name="idempotency_key_unique")]
        indexes = [models.Index(fields=["created_at"], name="idempotency_created_idx")]
