"""A session's spend ceiling (`budget`, the reference client's `BetaManagedAgentsBudgetLimit`).

Model calls are priced at list price from the pricing extension group's rows for provider
`vendor_b` (the messages shape the runtime speaks). A session with a budget can only be created for
a model that has such a price (`model_not_budgetable`); once its tracked list cost reaches
`max_list_cost` no new model request is made and the turn ends with `stop_reason: budget_reached`.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from registry.extensions.models import ModelPrice
from registry.extensions.selectors import list_price
from registry.sessions.models import Session

PROVIDER = "vendor_b"
MILLION = Decimal(1_000_000)
CENTS = Decimal(100)
# usage key -> the price field that applies to it (cache writes fall back to the input price).
PRICED_USAGE = (
    ("input_tokens", "input_per_1m"),
    ("output_tokens", "output_per_1m"),
    ("cache_read_input_tokens", "cache_read_per_1m"),
    ("cache_creation_input_tokens", "cache_write_per_1m"),
)


def limit_usd(budget: dict[str, Any]) -> Decimal:
    """`max_list_cost.amount` is in minor units (cents) of USD."""
    return Decimal(budget["max_list_cost"]["amount"]) / CENTS


def list_cost(price: ModelPrice, usage: dict[str, int]) -> Decimal:
    total = Decimal(0)
    for usage_key, price_field in PRICED_USAGE:
        rate = getattr(price, price_field)
        if rate is None:
            rate = price.input_per_1m
        total += Decimal(int(usage.get(usage_key) or 0)) * rate / MILLION
    return total


@dataclass
class BudgetMeter:
    """The session's budget and what it has spent so far, kept current by `charge`."""

    limit: Decimal | None
    spent: Decimal
    # A session's threads share its meter: their charges add up under this lock.
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @classmethod
    def for_session(cls, session: Session) -> BudgetMeter:
        limit = limit_usd(session.budget) if session.budget else None
        return cls(limit=limit, spent=Decimal(session.list_cost_usd))

    def charge(self, model: str, usage: dict[str, int]) -> Decimal:
        """The list cost of one call (zero when the model has no price), added to what is spent."""
        price = list_price(provider=PROVIDER, model=model)
        cost = list_cost(price, usage) if price else Decimal(0)
        with self._lock:
            self.spent += cost
        return cost

    def reached(self) -> bool:
        return self.limit is not None and self.spent >= self.limit
