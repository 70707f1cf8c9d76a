"""Reads for the extension groups: guardrails that apply to a workspace (and their objects, for other apps),
effective prices."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.utils import timezone

from registry.extensions.models import Guardrail, ModelPrice
from registry.extensions.serializers import GuardrailSerializer


def guardrails_for_workspace(workspace_id: str) -> list[Guardrail]:
    """Enabled guardrails for every workspace or naming this one (JSON containment done in Python for SQLite)."""
    candidates = Guardrail.objects.filter(enabled=True).order_by("name")
    return [
        guardrail for guardrail in candidates if not guardrail.workspace_ids or workspace_id in guardrail.workspace_ids
    ]


def guardrail_objects(guardrails: Iterable[Guardrail]) -> list[dict[str, Any]]:
    """The guardrails' API objects, for apps that carry them (the internal guardrail bundle)."""
    return [GuardrailSerializer.render(guardrail) for guardrail in guardrails]


def visible_guardrails(workspace_id: str) -> list[Guardrail]:
    """What a workspace may read: guardrails for every workspace or naming it, enabled or not."""
    return [
        guardrail
        for guardrail in Guardrail.objects.order_by("name")
        if not guardrail.workspace_ids or workspace_id in guardrail.workspace_ids
    ]


def effective_prices(*, provider: str | None = None, model: str | None = None) -> list[ModelPrice]:
    """The price in force now for each (provider, model): the newest row not in the future."""
    rows = ModelPrice.objects.filter(effective_from__lte=timezone.now())
    if provider:
        rows = rows.filter(provider=provider)
    if model:
        rows = rows.filter(model=model)
    newest: dict[tuple[str, str], ModelPrice] = {}
    for price in rows.order_by("provider", "model", "effective_from"):
        newest[(price.provider, price.model)] = price
    return list(newest.values())


def list_price(*, provider: str, model: str) -> ModelPrice | None:
    """The price in force now for one model of one provider, or None when it has no list price."""
    prices = effective_prices(provider=provider, model=model)
    return prices[0] if prices else None
