"""Reads shared by the apps: checking that referenced resources are live in the caller's workspace."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import models

from registry.core.errors import invalid_request


def require_live(model: type[models.Model], *, workspace: Any, ids: Sequence[str], field: str, noun: str) -> None:
    """400 naming `field` unless every id is an unarchived `model` row of the workspace."""
    live = set(
        model._default_manager.filter(workspace=workspace, pk__in=list(ids), archived_at__isnull=True).values_list(
            "pk", flat=True
        )
    )
    missing = [identifier for identifier in ids if identifier not in live]
    if missing:
        raise invalid_request(f"{field}: no live {noun} {missing[0]} in this workspace.")
