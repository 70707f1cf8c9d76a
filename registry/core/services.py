"""Writes shared by every resource family (archive)."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone


@transaction.atomic
def resource_archive(*, instance: Any) -> Any:
    """Set `archived_at` once; archiving an archived resource is a no-op that answers it again."""
    if instance.archived_at is None:
        instance.archived_at = timezone.now()
        instance.save(update_fields=["archived_at", "updated_at"])
    return instance
