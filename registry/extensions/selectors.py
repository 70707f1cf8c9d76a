"""Reads for the extension groups: guardrails that apply to a workspace, effective prices, rendering."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.utils import timezone

from registry.core.serialization import timestamp
from registry.extensions.models import Guardrail, ModelPrice


def render_guardrail(guardrail: Guardrail) -> dict[str, Any]:
    return {
        "id": str(guardrail.pk),
        "type": "guardrail",
        "name": guardrail.name,
        "guardrail_type": guardrail.type,
        "config": guardrail.config,
        "phases": guardrail.phases,
        "action": guardrail.action,
        "workspace_ids": guardrail.workspace_ids,
        "enabled": guardrail.enabled,
        "created_at": timestamp(guardrail.created_at),
        "updated_at": timestamp(guardrail.updated_at),
    }


def _number(value: Decimal | None) -> float | None:
    return None if value is None else float(value)


def render_price(price: ModelPrice) -> dict[str, Any]:
    return {
        "id": str(price.pk),
        "type": "model_price",
        "provider": price.provider,
        "model": price.model,
        "input_per_1m": _number(price.input_per_1m),
        "output_per_1m": _number(price.output_per_1m),
        "cache_read_per_1m": _number(price.cache_read_per_1m),
        "cache_write_per_1m": _number(price.cache_write_per_1m),
        "effective_from": timestamp(price.effective_from),
        "created_at": timestamp(price.created_at),
    }


def guardrails_for_workspace(workspace_id: str) -> list[Guardrail]:
    """Enabled guardrails for every workspace or naming this one (JSON containment done in Python for SQLite)."""
    candidates = Guardrail.objects.filter(enabled=True).order_by("name")
    return [
        guardrail for guardrail in candidates if not guardrail.workspace_ids or workspace_id in guardrail.workspace_ids
    ]


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
