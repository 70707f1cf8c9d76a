"""The counter stores on their own: local token buckets and budgets, and the Redis Lua windows against the real
Redis (unique key prefixes per test), including its outage behaviour."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, TypeVar
from zoneinfo import ZoneInfo

import pytest
from prometheus_client import CollectorRegistry

from gatewayproxy.pipeline.limits import Calendar
from gatewayproxy.plugins.rate_limiters import (
    MICRO_USD,
    REQUESTS,
    TOKENS,
    Charge,
    LimiterMetrics,
    LimiterUnavailable,
    LocalStore,
    RedisWindowOptions,
    RedisWindowStore,
)
from tests.support.live import free_port, private_redis

SHARED_REDIS = "redis://127.0.0.1:6379/0"
Result = TypeVar("Result")


def requests(key: str, limit: int, window_ms: int = 60_000) -> Charge:
    return Charge(key, REQUESTS, limit, 1, window_ms)


def tokens(key: str, limit: int, amount: int, window_ms: int = 60_000) -> Charge:
    return Charge(key, TOKENS, limit, amount, window_ms)


def budget(key: str, limit: int, amount: int, resets_in_ms: int = 5_000) -> Charge:
    return Charge(key, MICRO_USD, limit, amount, 0, resets_in_ms)


def redis_store(
    url: str = SHARED_REDIS,
    failure_mode: str = "deny",
    registry: CollectorRegistry | None = None,
    timeout_ms: int = 100,
) -> RedisWindowStore:
    options = RedisWindowOptions(
        url=url,
        key_prefix=f"test:{uuid.uuid4().hex}:",
        timeout_ms=timeout_ms,
        connect_timeout_ms=max(timeout_ms, 1_000),
        retry_interval_ms=50,
    )
    return RedisWindowStore(
        "shared", options, failure_mode, LocalStore(), LimiterMetrics(registry or CollectorRegistry())
    )


def with_store(body: Callable[[RedisWindowStore], Awaitable[Result]], **options: Any) -> Result:
    """Run `body` against a fresh Redis store on its own loop, closing the store after."""

    async def run() -> Result:
        store = redis_store(**options)
        try:
            return await body(store)
        finally:
            await store.close()

    return asyncio.run(run())


def test_local_bucket_admits_the_limit_then_refuses_with_the_refill_time() -> None:
    store = LocalStore()
    decisions = [store.acquire_now([requests("a", 3)]) for _ in range(4)]
    assert [decision.allowed for decision in decisions] == [True, True, True, False]
    assert [decision.remaining[0] for decision in decisions[:3]] == [2, 1, 0]
    assert 19 < decisions[3].retry_after <= 20  # one request refills in 60 s / 3
    assert decisions[3].denied == 0


def test_local_charges_are_all_or_nothing() -> None:
    store = LocalStore()
    assert store.acquire_now([requests("r", 10), tokens("t", 100, 80)]).allowed
    refused = store.acquire_now([requests("r", 10), tokens("t", 100, 80)])
    assert not refused.allowed and refused.denied == 1
    assert store.acquire_now([requests("r", 10)]).remaining == (8,)  # the refused request took nothing


def test_local_oversized_request_passes_only_on_a_full_bucket_and_settles_back() -> None:
    store = LocalStore()
    first = store.acquire_now([tokens("t", 100, 500)])
    assert first.allowed
    assert not store.acquire_now([tokens("t", 100, 1)]).allowed  # in debt
    asyncio.run(store.adjust([tokens("t", 100, 500)], [-480], first.stamp))  # real usage was 20
    assert store.acquire_now([tokens("t", 100, 70)]).allowed


def test_local_budget_reserves_and_releases() -> None:
    store = LocalStore()
    charge = budget("b", 1_000, 600)
    assert store.acquire_now([charge]).allowed
    refused = store.acquire_now([charge])
    assert not refused.allowed and refused.retry_after == 5.0 and refused.remaining == (400,)
    asyncio.run(store.adjust([charge], [-600], 0))
    assert store.acquire_now([charge]).allowed


def test_calendar_periods_follow_the_budget_timezone() -> None:
    calendar = Calendar("Asia/Tokyo")
    # 2025-01-31 20:00 UTC is already February 1st in Tokyo.
    now = datetime(2025, 1, 31, 20, 0, tzinfo=ZoneInfo("UTC")).timestamp()
    month, day = calendar.period("month", now), calendar.period("day", now)
    assert (month.id, day.id) == ("2025-02", "2025-02-01")
    assert month.ends_at == datetime(2025, 3, 1, tzinfo=ZoneInfo("Asia/Tokyo")).timestamp()
    assert day.ends_at == datetime(2025, 2, 2, tzinfo=ZoneInfo("Asia/Tokyo")).timestamp()
    december = calendar.period("month", datetime(2025, 12, 31, 23, 0, tzinfo=ZoneInfo("UTC")).timestamp())
    assert december.id == "2026-01"


def test_redis_window_admits_the_limit_and_says_when_it_frees() -> None:
    async def body(store: RedisWindowStore) -> list[Any]:
        return [await store.acquire([requests("w", 3)]) for _ in range(4)]

    decisions = with_store(body)
    assert [decision.allowed for decision in decisions] == [True, True, True, False]
    assert [decision.remaining[0] for decision in decisions] == [2, 1, 0, 0]
    # All three sit in the current one-second slot, which leaves the window 60-61 s from now.
    assert 59 < decisions[3].retry_after <= 61


def test_redis_script_checks_every_window_in_one_call() -> None:
    async def body(store: RedisWindowStore) -> tuple[Any, Any, Any]:
        first = await store.acquire([requests("r", 10), tokens("t", 100, 80), budget("b", 1000, 10)])
        refused = await store.acquire([requests("r", 10), tokens("t", 100, 80), budget("b", 1000, 10)])
        after = await store.acquire([requests("r", 10), budget("b", 1000, 10)])
        return first, refused, after

    first, refused, after = with_store(body)
    assert first.allowed and first.remaining == (9, 20, 990)
    assert not refused.allowed and refused.denied == 1
    assert after.remaining == (8, 980)  # the refused call counted nothing anywhere


def test_redis_adjust_corrects_the_slot_it_was_counted_in() -> None:
    async def body(store: RedisWindowStore) -> tuple[bool, bool, int]:
        charge = tokens("t", 100, 90)
        first = await store.acquire([charge])
        before = (await store.acquire([tokens("t", 100, 50)])).allowed
        await store.adjust([charge], [-80], first.stamp)
        after = await store.acquire([tokens("t", 100, 50)])
        return before, after.allowed, after.remaining[0]

    assert with_store(body) == (False, True, 40)


async def script_calls(store: RedisWindowStore) -> int:
    """How many EVALSHA calls the store's Redis has served."""
    stats = await store.client.info("commandstats")
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


def test_redis_settlements_of_concurrent_requests_share_one_call() -> None:
    """Fifty requests settling at once: every adjustment lands, in far fewer script calls than requests."""

    async def body(store: RedisWindowStore) -> tuple[int, int, int]:
        charges = [tokens("t", 10_000, 100), budget("b", 100_000, 1_000)]
        decisions = [await store.acquire(charges) for _ in range(50)]
        calls_before = await script_calls(store)
        await asyncio.gather(*(store.adjust(charges, [-60, -900], decision.stamp) for decision in decisions))
        calls = await script_calls(store) - calls_before
        after = await store.acquire([tokens("t", 10_000, 0), budget("b", 100_000, 0)])
        return calls, after.remaining[0], after.remaining[1]

    with private_redis() as redis:  # its own server, so no other client's script calls are counted
        calls, tokens_left, budget_left = with_store(body, url=redis.url)
    assert (tokens_left, budget_left) == (10_000 - 50 * 40, 100_000 - 50 * 100)
    assert calls == 1


def test_redis_budget_expires_with_its_period_and_refuses_until_then() -> None:
    async def body(store: RedisWindowStore) -> tuple[Any, int]:
        charge = budget("b", 100, 60, resets_in_ms=7_000)
        await store.acquire([charge])
        refused = await store.acquire([charge])
        ttl = await store.client.pttl(store.prefix + "b")
        return refused, ttl

    refused, ttl = with_store(body)
    assert not refused.allowed and refused.retry_after == 7.0
    assert 7_000 < ttl <= 7_000 + 86_400_000


def test_concurrent_acquisitions_never_overshoot_and_queue_for_connections() -> None:
    async def body(store: RedisWindowStore) -> int:
        # Far more callers than pooled connections: they wait for one rather than count as an outage.
        decisions = await asyncio.gather(*(store.acquire([requests("c", 10)]) for _ in range(500)))
        return sum(decision.allowed for decision in decisions)

    # A budget no queue of 500 exceeds on a busy machine: this is about queueing, not about timeouts.
    assert with_store(body, timeout_ms=5_000) == 10


def test_unreachable_redis_with_deny_refuses_fast() -> None:
    async def body(store: RedisWindowStore) -> float:
        started = time.monotonic()
        for _ in range(3):
            with pytest.raises(LimiterUnavailable):
                await store.acquire([requests("x", 5)])
        return time.monotonic() - started

    assert with_store(body, url=f"redis://127.0.0.1:{free_port()}/0") < 0.5


def test_unreachable_redis_with_allow_counts_locally_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    registry = CollectorRegistry()

    async def body(store: RedisWindowStore) -> list[bool]:
        return [(await store.acquire([requests("x", 2)])).allowed for _ in range(3)]

    with caplog.at_level("WARNING", logger="gatewayproxy.limits"):
        allowed = with_store(body, url=f"redis://127.0.0.1:{free_port()}/0", failure_mode="allow", registry=registry)
    assert allowed == [True, True, False]  # the local fallback still limits
    assert registry.get_sample_value("gateway_rate_limiter_degraded", {"limiter": "shared"}) == 1
    assert registry.get_sample_value("gateway_rate_limiter_fallback_decisions_total", {"limiter": "shared"}) == 3
    assert sum("redis is unreachable" in record.message for record in caplog.records) == 1
