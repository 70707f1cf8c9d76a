"""Writes shared by every resource family: archive, delete, and the update of plain fields and metadata."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db import models, transaction
from django.utils import timezone

from registry.core.fields import merge_metadata


@transaction.atomic
def resource_archive(*, instance: Any) -> Any:
    """Set `archived_at` once; archiving an archived resource is a no-op that answers it again."""
    if instance.archived_at is None:
        instance.archived_at = timezone.now()
        instance.save(update_fields=["archived_at", "updated_at"])
    return instance


@transaction.atomic
def resource_delete(*, instance: models.Model) -> None:
    """Delete a resource that keeps nothing outside the database (the others have their app's service)."""
    instance.delete()


def apply_updates(instance: models.Model, values: dict[str, Any], plain: Iterable[str] = ()) -> None:
    """Set each of `plain` given in `values` on `instance`; merge a given `metadata` patch into its own."""
    for field in plain:
        if field in values:
            setattr(instance, field, values[field])
    if "metadata" in values:
        instance.metadata = merge_metadata(instance.metadata, values["metadata"])  # type: ignore[attr-defined]
