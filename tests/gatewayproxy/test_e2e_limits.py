"""Rate limits through a real gateway: refusals, bucket keys, the most specific match, headroom headers, token
settlement on the provider's usage, and Redis outages (private redis-server stopped and started again)."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from gatewayproxy.config.loader import validate_document
from tests.support.gateway.limits import (
    CHAT_TOKENS,
    chat,
    document,
    error_code,
    poll,
    redis_limiter,
)
from tests.support.gateway.provider import FakeProvider
from tests.support.gateway.thread import GatewayFactory, loopback_config
from tests.support.live import private_redis
from tests.support.serving import serving

pytestmark = pytest.mark.e2e


def test_qpm_refuses_in_both_protocols_with_retry_after(gateway_factory: GatewayFactory, primary: FakeProvider) -> None:
    gateway = gateway_factory(document(primary, rate_limits=[{"name": "all", "qpm": 2}]))
    statuses = [chat(gateway.url).status_code for _ in range(2)]
    refused = chat(gateway.url)
    messages = httpx.post(
        f"{gateway.url}/v1/messages",
        json={"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]},
    )
    assert statuses == [200, 200]
    assert refused.status_code == 429 and error_code(refused) == "rate_limited"
    assert 1 <= int(refused.headers["retry-after"]) <= 30  # a minute of two requests frees one in 30 s
    assert messages.status_code == 429 and messages.json()["error"]["code"] == "rate_limited"
    assert "retry-after" in messages.headers
    assert len(primary.received) == 2


def test_local_buckets_survive_a_snapshot_swap(gateway_factory: GatewayFactory, primary: FakeProvider) -> None:
    config = document(primary, rate_limits=[{"name": "all", "qpm": 2}])
    gateway = gateway_factory(config)
    before = [chat(gateway.url).status_code for _ in range(2)]
    swap = gateway.gateway.swap(validate_document(loopback_config(config)))
    asyncio.run_coroutine_threadsafe(swap, gateway.loop).result(timeout=10)
    after = chat(gateway.url)
    assert before == [200, 200]
    assert after.status_code == 429  # the new snapshot counts in the same buckets (and registered no metric twice)


def test_most_specific_match_wins_and_buckets_follow_key_dims(
    gateway_factory: GatewayFactory, primary: FakeProvider
) -> None:
    limits = [
        {"name": "everyone", "qpm": 1},
        {"name": "team-a", "match": {"scope": {"team": "a"}}, "qpm": 2},
        {"name": "team-a-again", "match": {"scope": {"team": "a"}}, "qpm": 100},
    ]
    gateway = gateway_factory(document(primary, rate_limits=limits, spend={"key_dims": ["user"]}))
    team_a_u1 = [chat(gateway.url, **{"x-scope-team": "a", "x-scope-user": "u1"}).status_code for _ in range(3)]
    team_a_u2 = chat(gateway.url, **{"x-scope-team": "a", "x-scope-user": "u2"}).status_code
    team_b_u1 = [chat(gateway.url, **{"x-scope-team": "b", "x-scope-user": "u1"}).status_code for _ in range(2)]
    assert team_a_u1 == [200, 200, 429]  # `team-a` (two dims beat none; the tie goes to config order)
    assert team_a_u2 == 200  # another user, another bucket
    assert team_b_u1 == [200, 429]  # `everyone`, whose bucket for u1 is separate from team-a's


def test_headroom_headers_on_admitted_responses_only_when_enabled(
    gateway_factory: GatewayFactory, primary: FakeProvider
) -> None:
    limits = [{"name": "all", "qpm": 10, "tpm": 100_000, "budget_usd_per_month": 5}]
    pricing = {"input_per_1m": 1.0, "output_per_1m": 2.0}
    spend = {"headers": {"enabled": True}, "admission": {"default_max_output_tokens": 1000}}
    gateway = gateway_factory(document(primary, rate_limits=limits, spend=spend, pricing=pricing))
    first = chat(gateway.url)
    quiet = gateway_factory(document(primary, rate_limits=limits, pricing=pricing))
    plain = chat(quiet.url)
    assert first.status_code == 200
    assert first.headers["x-ratelimit-limit-requests"] == "10"
    assert first.headers["x-ratelimit-remaining-requests"] == "9"
    assert first.headers["x-ratelimit-limit-tokens"] == "100000"
    remaining_tokens = int(first.headers["x-ratelimit-remaining-tokens"])
    estimate = 100_000 - remaining_tokens
    assert 1000 < estimate < 1100  # the default output maximum plus the body's estimate
    # Reserved: the estimated input at $1/M plus 1000 output tokens at $2/M.
    reserved = 5 - float(first.headers["x-budget-remaining-usd"])
    assert reserved == pytest.approx(((estimate - 1000) * 1.0 + 1000 * 2.0) / 1e6, abs=2e-6)
    assert not any(name.startswith(("x-ratelimit", "x-budget")) for name in plain.headers)


def test_token_limit_settles_on_the_reported_usage(gateway_factory: GatewayFactory, primary: FakeProvider) -> None:
    limits = [{"name": "all", "tpm": 1500}]
    spend = {"headers": {"enabled": True}, "admission": {"default_max_output_tokens": 1000}}
    gateway = gateway_factory(document(primary, rate_limits=limits, spend=spend))
    first = chat(gateway.url)
    estimate = 1500 - int(first.headers["x-ratelimit-remaining-tokens"])
    # Two estimates do not fit in 1500; once the first is settled on its 18 real tokens, the second does.
    second = poll(lambda: (response := chat(gateway.url)).status_code == 200 and response)
    assert first.status_code == 200 and second
    remaining = int(second.headers["x-ratelimit-remaining-tokens"])
    assert 1500 - CHAT_TOKENS - estimate <= remaining <= 1500 - CHAT_TOKENS - estimate + 30  # plus a second of refill


def test_refused_request_is_not_sent_upstream_and_failed_one_releases_tokens(
    gateway_factory: GatewayFactory, primary: FakeProvider
) -> None:
    limits = [{"name": "all", "tpm": 1500}]
    spend = {"admission": {"default_max_output_tokens": 1000}}
    gateway = gateway_factory(document(primary, rate_limits=limits, spend=spend))
    primary.reset("500")
    failed = chat(gateway.url)
    again = poll(lambda: (response := chat(gateway.url)).status_code == 200 and response)
    assert failed.status_code == 502 and again
    assert len(primary.received) == 2


def test_redis_outage_with_deny_answers_503_fast_then_recovers(
    gateway_factory: GatewayFactory, primary: FakeProvider
) -> None:
    with private_redis() as redis_server:
        config = document(primary, rate_limits=[{"name": "all", "qpm": 1000}], plugins=redis_limiter(redis_server.url))
        with serving(gateway_factory(config)) as gateway:  # stopped before its redis
            assert chat(gateway.url).status_code == 200
            redis_server.stop()
            started = time.monotonic()
            down = chat(gateway.url)
            elapsed = time.monotonic() - started
            redis_server.start()
            back = poll(lambda: (response := chat(gateway.url)).status_code == 200 and response)
            unavailable = gateway.metrics_text
    assert down.status_code == 503 and error_code(down) == "overloaded"
    assert elapsed < 0.5
    assert back
    assert 'gateway_rate_limiter_unavailable_total{limiter="shared"}' in unavailable


def test_redis_outage_with_allow_limits_locally_and_reports_it(
    gateway_factory: GatewayFactory, primary: FakeProvider, caplog: pytest.LogCaptureFixture
) -> None:
    with private_redis() as redis_server:
        config = document(
            primary,
            rate_limits=[{"name": "all", "qpm": 1000}],
            plugins=redis_limiter(redis_server.url, failure_mode="allow"),
        )
        with serving(gateway_factory(config)) as gateway, caplog.at_level("WARNING", logger="gatewayproxy.limits"):
            redis_server.stop()
            during = [chat(gateway.url).status_code for _ in range(3)]
            degraded = gateway.metrics_text
            redis_server.start()
            recovered = poll(
                lambda: (
                    chat(gateway.url).status_code == 200
                    and 'gateway_rate_limiter_degraded{limiter="shared"} 0.0' in gateway.metrics_text
                )
            )
    assert during == [200, 200, 200]
    assert 'gateway_rate_limiter_degraded{limiter="shared"} 1.0' in degraded
    assert 'gateway_rate_limiter_fallback_decisions_total{limiter="shared"} 3.0' in degraded
    assert recovered
    messages = [record.message for record in caplog.records]
    assert sum("redis is unreachable" in message for message in messages) == 1  # once per outage
    assert any("redis answers again" in message for message in messages)
