"""Spend budgets through a real gateway: the atomic reservation under a burst (local and Redis stores),
reconciliation to the actual cost, release on failure, the `unpriced_model` modes, and the boot checks."""

from __future__ import annotations

from typing import Any

import pytest

from gatewayproxy.config.loader import ConfigError, validate_document
from tests.support.gateway.limits import burst, chat, document, error_code, poll, redis_limiter
from tests.support.gateway.provider import FakeProvider
from tests.support.gateway.thread import GatewayFactory, GatewayThread

pytestmark = pytest.mark.e2e
SHARED_REDIS = "redis://127.0.0.1:6379/0"
# Output at $1000 per million: a 1000-token output maximum reserves about $1; $1.50 leaves room for one.
DEAR = {"input_per_1m": 1.0, "output_per_1m": 1000.0}
ONE_AT_A_TIME = {"headers": {"enabled": True}, "admission": {"default_max_output_tokens": 1000}}
# The fake provider's usage (11 input, 7 output tokens) at DEAR prices.
ACTUAL_COST = (11 * 1.0 + 7 * 1000.0) / 1e6


def budget_document(provider: FakeProvider, plugins: dict[str, Any] | None = None, **limit: Any) -> dict[str, Any]:
    return document(
        provider,
        rate_limits=[{"name": "spend", "budget_usd_per_month": 1.5, **limit}],
        spend=ONE_AT_A_TIME,
        pricing=DEAR,
        plugins=plugins,
    )


@pytest.fixture(params=["local", "redis"])
def budgeted(request: pytest.FixtureRequest, gateway_factory: GatewayFactory, primary: FakeProvider) -> GatewayThread:
    """A gateway with room for one reservation in its monthly budget, counted locally or in the shared Redis."""
    # The burst is about admitting exactly one, not about outages: a slow answer under load is not one.
    plugins = redis_limiter(SHARED_REDIS, timeout_ms=2000) if request.param == "redis" else None
    return gateway_factory(budget_document(primary, plugins))


def test_fifty_concurrent_requests_against_room_for_one_admit_exactly_one(
    budgeted: GatewayThread, primary: FakeProvider
) -> None:
    gateway = budgeted
    primary.reset("delay:0.5")  # the admitted request holds its reservation while the others arrive
    responses = burst(gateway.url, 50)
    statuses = sorted(response.status_code for response in responses)
    assert statuses == [200] + [429] * 49
    refused = [response for response in responses if response.status_code == 429]
    assert {error_code(response) for response in refused} == {"budget_exceeded"}
    assert all(int(response.headers["retry-after"]) >= 1 for response in refused)
    assert len(primary.received) == 1


def test_reservation_is_reconciled_to_the_actual_cost(budgeted: GatewayThread) -> None:
    gateway = budgeted
    first = chat(gateway.url)
    # Room for one reservation only: the next is admitted once the first is settled at its actual cost.
    second = poll(lambda: (response := chat(gateway.url)).status_code == 200 and response)
    assert first.status_code == 200 and second
    spent_before_second = (
        1.5 - float(second.headers["x-budget-remaining-usd"]) - (1.5 - float(first.headers["x-budget-remaining-usd"]))
    )
    assert spent_before_second == pytest.approx(ACTUAL_COST, abs=2e-6)


def test_failed_request_releases_its_reservation(gateway_factory: GatewayFactory, primary: FakeProvider) -> None:
    gateway = gateway_factory(budget_document(primary))
    primary.reset("500")
    failed = chat(gateway.url)
    later = poll(lambda: (response := chat(gateway.url)).status_code == 200 and response)
    assert failed.status_code == 502 and later
    # Room for one reservation: the later request was admitted only because the failed one gave all of its back.
    assert later.headers["x-budget-remaining-usd"] == failed.headers["x-budget-remaining-usd"]


def test_daily_budget_is_enforced_too(gateway_factory: GatewayFactory, primary: FakeProvider) -> None:
    config = document(
        primary, rate_limits=[{"name": "spend", "budget_usd_per_day": 0.5}], spend=ONE_AT_A_TIME, pricing=DEAR
    )
    gateway = gateway_factory(config)
    refused = chat(gateway.url)
    assert refused.status_code == 429 and error_code(refused) == "budget_exceeded"
    assert 1 <= int(refused.headers["retry-after"]) <= 86_400


@pytest.mark.parametrize(
    ("mode", "status", "spent"),
    [
        ("deny", 403, None),
        ("estimate", 200, 0.25),
        ("allow_untracked", 200, 0.0),
    ],
)
def test_unpriced_model_modes(
    gateway_factory: GatewayFactory, primary: FakeProvider, mode: str, status: int, spent: float | None
) -> None:
    admission: dict[str, Any] = {"unpriced_model": mode}
    if mode == "estimate":
        admission["estimate_usd_per_request"] = 0.25
    config = document(
        primary,
        rate_limits=[{"name": "spend", "budget_usd_per_month": 1}],
        spend={"headers": {"enabled": True}, "admission": admission},
        plugins={"cost_model": {"name": "prices", "kind": "static_table", "table": {"other": DEAR}}},
    )
    gateway = gateway_factory(config)
    first = chat(gateway.url)
    second = chat(gateway.url)
    assert first.status_code == status
    if spent is None:
        assert error_code(first) == "unpriced_model"
        assert not primary.received
        return
    assert 1 - float(first.headers["x-budget-remaining-usd"]) == pytest.approx(spent)
    assert 1 - float(second.headers["x-budget-remaining-usd"]) == pytest.approx(spent * 2)


@pytest.mark.parametrize("field", ["budget_usd_per_month", "budget_usd_per_day"])
def test_budget_without_any_price_fails_boot_naming_the_key(primary: FakeProvider, field: str) -> None:
    config = document(primary, rate_limits=[{"name": "spend", field: 1}])
    with pytest.raises(ConfigError) as raised:
        validate_document(config)
    assert raised.value.problems == [f"rate_limits[0].{field}: needs destination pricing or plugins.cost_model"]


def test_daily_budget_is_deprecated_at_boot(primary: FakeProvider) -> None:
    loaded = validate_document(
        document(primary, rate_limits=[{"name": "spend", "budget_usd_per_day": 1}], pricing=DEAR)
    )
    assert any("budget_usd_per_day is deprecated" in warning for warning in loaded.warnings)
