"""Writes for the extension groups: guardrails (policy) and dated model prices (pricing)."""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from registry.core.errors import conflict, not_found
from registry.extensions.catalog import GUARDRAIL_TYPES
from registry.extensions.models import Guardrail, ModelPrice


@transaction.atomic
def guardrail_create(*, values: dict[str, Any]) -> Guardrail:
    """A guardrail; its phases default to its type's. Names are unique (409)."""
    values = {"phases": GUARDRAIL_TYPES[values["type"]]["phases"], **values}
    try:
        with transaction.atomic():
            return Guardrail.objects.create(**values)
    except IntegrityError:
        raise conflict(f"name: a guardrail named {values['name']!r} exists.") from None


@transaction.atomic
def guardrail_update(*, guardrail: Guardrail, values: dict[str, Any]) -> Guardrail:
    locked = Guardrail.objects.select_for_update().get(pk=guardrail.pk)
    for field, value in values.items():
        setattr(locked, field, value)
    try:
        with transaction.atomic():
            locked.save()
    except IntegrityError:
        raise conflict(f"name: a guardrail named {values.get('name')!r} exists.") from None
    return locked


@transaction.atomic
def guardrail_delete(*, guardrail: Guardrail) -> None:
    guardrail.delete()


@transaction.atomic
def model_price_create(*, values: dict[str, Any]) -> ModelPrice:
    """A dated price row (`effective_from` defaults to now); one per model and instant (409)."""
    values = {"effective_from": timezone.now(), **values}
    try:
        with transaction.atomic():
            return ModelPrice.objects.create(**values)
    except IntegrityError:
        raise conflict("effective_from: a price for this model starts at that instant already.") from None


@transaction.atomic
def model_price_delete(*, price_id: str) -> None:
    deleted, _ = ModelPrice.objects.filter(pk=price_id).delete()
    if not deleted:
        raise not_found(f"Model price {price_id} not found.")
