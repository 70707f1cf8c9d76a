"""The `rate_limiter` plugin kinds: where a request's counters (rate windows and spend budgets) are kept.

`token_bucket_local` keeps token buckets and budget counters in this process; `redis_window` keeps sliding
windows and budget counters in Redis and checks every counter of a request in one atomic Lua call, so replicas
share one limit. When Redis cannot be reached, `failure_mode` decides: `deny` refuses fast, `allow` and
`log_only` count in a bounded local limiter until Redis answers again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge
from pydantic import Field

from gatewayproxy.config.kinds import canonical_kind
from gatewayproxy.config.models import PluginInstance
from gatewayproxy.plugins.decisions import PluginOptions, plugin_options
from gatewayproxy.plugins.outage import Outage

logger = logging.getLogger("gatewayproxy.limits")
SCRIPT = (Path(__file__).parent / "rate_limits.lua").read_text(encoding="utf-8")
# Past this many local counters, idle ones (full buckets, ended budget periods) are dropped.
LOCAL_COUNTER_LIMIT = 100_000
WINDOW_SLOTS = 60  # SLOTS of the script: a window is kept as this many slots
SETTLE_COALESCE_SECONDS = 0.002
SETTLE_BATCH = 256  # charges per adjust call
LONGEST_WINDOW = 3600.0
KEY = "plugins.rate_limiter"


REQUESTS, TOKENS, MICRO_USD = "requests", "tokens", "micro_usd"


@dataclass(frozen=True)
class Charge:
    """One counter a request draws from, in `unit`: a sliding window (`window_ms` > 0) of requests or tokens, or
    a calendar budget in micro-USD (`window_ms` 0; its key names the period, which ends in `resets_in_ms`)."""

    key: str
    unit: str
    limit: int
    amount: int
    window_ms: int
    resets_in_ms: int = 0

    @property
    def is_window(self) -> bool:
        """Whether this is a rate window rather than a calendar budget."""
        return self.window_ms > 0


@dataclass(frozen=True)
class Decision:
    """The outcome of one acquisition: `denied` is the index of the first refusing charge (-1: admitted),
    `remaining` the headroom of each charge, `stamp` when it was counted (to adjust the same place later)."""

    allowed: bool
    retry_after: float
    remaining: tuple[int, ...]
    store: CounterStore
    denied: int = -1
    stamp: int = 0


class CounterStore(Protocol):
    """Where counters live: all-or-nothing acquisition, and later adjustment by a delta per charge."""

    async def acquire(self, charges: Sequence[Charge]) -> Decision:
        """Count every charge, or none of them when one would go over its limit."""

    async def adjust(self, charges: Sequence[Charge], deltas: Sequence[int], stamp: int) -> None:
        """Add `deltas` (negative gives back) to the counters the charges were taken from."""


class LimiterUnavailable(Exception):
    """The shared store cannot be reached and the plugin's `failure_mode` is `deny`."""


class RedisWindowOptions(PluginOptions):
    """Options of `redis_window`."""

    url: str
    key_prefix: str = "gw:rl:"
    timeout_ms: int = Field(default=100, gt=0, le=5000)
    connect_timeout_ms: int = Field(default=500, gt=0, le=5000)
    retry_interval_ms: int = Field(default=500, gt=0)
    max_connections: int = Field(default=16, gt=0)


@dataclass
class Bucket:
    """A token bucket: `tokens` left as of `updated` (monotonic seconds); it may go negative (debt)."""

    tokens: float
    updated: float


class LocalStore:
    """Token buckets (rate windows) and counters (budgets) in this process; atomic because nothing here awaits."""

    def __init__(self) -> None:
        self.buckets: dict[str, Bucket] = {}
        self.budgets: dict[str, tuple[int, float]] = {}

    def _bucket(self, charge: Charge, now: float) -> Bucket:
        """The bucket of a window charge, refilled at `limit` per window up to `limit`."""
        bucket = self.buckets.get(charge.key)
        if bucket is None:
            bucket = self.buckets[charge.key] = Bucket(float(charge.limit), now)
        rate = charge.limit / (charge.window_ms / 1000)
        bucket.tokens = min(float(charge.limit), bucket.tokens + (now - bucket.updated) * rate)
        bucket.updated = now
        return bucket

    def _used(self, charge: Charge, now: float) -> int:
        used, ends = self.budgets.get(charge.key, (0, 0.0))
        return used if ends > now else 0

    def _verdict(self, charge: Charge, now: float) -> tuple[int, float]:
        """Headroom before this request, and seconds to wait (0: it fits)."""
        if charge.is_window:
            bucket = self._bucket(charge, now)
            # A request bigger than the whole window is let through once the bucket is full.
            missing = min(charge.amount, charge.limit) - bucket.tokens
            wait = missing / (charge.limit / (charge.window_ms / 1000)) if missing > 0 else 0.0
            return int(bucket.tokens), wait
        headroom = charge.limit - self._used(charge, now)
        return headroom, (charge.resets_in_ms / 1000 if charge.amount > headroom else 0.0)

    def _take(self, charge: Charge, amount: int, now: float) -> None:
        if charge.is_window:
            bucket = self._bucket(charge, now)
            bucket.tokens = min(float(charge.limit), bucket.tokens - amount)
        elif charge.key in self.budgets or amount > 0:
            ends = self.budgets[charge.key][1] if charge.key in self.budgets else now + charge.resets_in_ms / 1000
            self.budgets[charge.key] = (max(self._used(charge, now) + amount, 0), ends)

    def acquire_now(self, charges: Sequence[Charge]) -> Decision:
        """`acquire` without awaiting (the fallback of the Redis store uses it too)."""
        now = time.monotonic()
        verdicts = [self._verdict(charge, now) for charge in charges]
        refused = [index for index, (_, wait) in enumerate(verdicts) if wait > 0]
        if refused:
            return Decision(
                False,
                max(wait for _, wait in verdicts),
                tuple(headroom for headroom, _ in verdicts),
                self,
                denied=refused[0],
            )
        for charge in charges:
            self._take(charge, charge.amount, now)
        self._prune(now)
        remaining = [headroom - charge.amount for (headroom, _), charge in zip(verdicts, charges, strict=True)]
        return Decision(True, 0.0, tuple(remaining), self)

    async def acquire(self, charges: Sequence[Charge]) -> Decision:
        return self.acquire_now(charges)

    async def adjust(self, charges: Sequence[Charge], deltas: Sequence[int], stamp: int) -> None:
        now = time.monotonic()
        for charge, delta in zip(charges, deltas, strict=True):
            self._take(charge, delta, now)

    def _prune(self, now: float) -> None:
        """Keep memory bounded: once there are too many, drop buckets idle for the longest window (so full again)
        and budgets whose period ended."""
        if len(self.buckets) + len(self.budgets) <= LOCAL_COUNTER_LIMIT:
            return
        self.buckets = {key: bucket for key, bucket in self.buckets.items() if bucket.updated + LONGEST_WINDOW > now}
        self.budgets = {key: entry for key, entry in self.budgets.items() if entry[1] > now}


class LimiterMetrics:
    """The limiter's health metrics (registered once per process)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.degraded = Gauge(
            "gateway_rate_limiter_degraded",
            "1 while the shared limiter store is unreachable and a local fallback counts.",
            ["limiter"],
            registry=registry,
        )
        self.fallback_decisions = Counter(
            "gateway_rate_limiter_fallback_decisions",
            "Admissions decided by the local fallback limiter.",
            ["limiter"],
            registry=registry,
        )
        self.unavailable = Counter(
            "gateway_rate_limiter_unavailable",
            "Requests refused because the shared limiter store was unreachable.",
            ["limiter"],
            registry=registry,
        )


class RedisWindowStore:
    """Sliding windows and budget counters in Redis; one Lua call per acquisition or adjustment."""

    def __init__(
        self, name: str, options: RedisWindowOptions, failure_mode: str, fallback: LocalStore, metrics: LimiterMetrics
    ) -> None:
        self.name = name
        self.prefix = options.key_prefix
        self.deny_when_down = failure_mode == "deny"
        self.fallback = fallback
        self.metrics = metrics
        # redis-py brings OpenTelemetry along (about 20 MB a worker): imported only where Redis is configured.
        import redis.asyncio as redis
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff
        from redis.exceptions import RedisError

        self.failures = (RedisError, OSError, TimeoutError)
        # A bursty caller waits for a free connection instead of failing over. A down Redis refuses connections
        # at once; the longer connect timeout only keeps a burst of new connections from looking like an outage.
        pool = redis.BlockingConnectionPool.from_url(
            options.url,
            max_connections=options.max_connections,
            timeout=None,
            socket_timeout=options.timeout_ms / 1000,
            socket_connect_timeout=options.connect_timeout_ms / 1000,
            retry=Retry(NoBackoff(), 0),
        )
        self.client = redis.Redis.from_pool(pool)
        self.script = self.client.register_script(SCRIPT)
        self.outage = Outage(
            f"rate limiter {name}",
            options.retry_interval_ms / 1000,
            while_down="failing over until it answers again",
            on_change=lambda down: metrics.degraded.labels(name).set(int(down)),
        )
        self._settlements: list[tuple[Charge, int, int]] = []
        self._settling: asyncio.Task[None] | None = None

    async def _call(
        self, mode: str, charges: Sequence[Charge], amounts: Sequence[int], fourth: Sequence[int]
    ) -> list[int]:
        """One script call; `fourth` is each charge's `resets_in_ms` (acquire) or the stamp it was counted at
        (adjust)."""
        args: list[int | str] = [mode]
        for charge, amount, extra in zip(charges, amounts, fourth, strict=True):
            args += [charge.limit, amount, charge.window_ms, extra]
        keys = [self.prefix + charge.key for charge in charges]
        # Connecting and each command (a script reload after a Redis restart too) are bounded by the socket
        # timeouts; waiting for a pooled connection is queueing under load, not an outage, so it is not.
        return [int(value) for value in await self.script(keys=keys, args=args)]

    async def acquire(self, charges: Sequence[Charge]) -> Decision:
        if self.outage.should_try():
            try:
                result = await self._call(
                    "acquire",
                    charges,
                    [charge.amount for charge in charges],
                    [charge.resets_in_ms for charge in charges],
                )
            except self.failures as error:
                self.outage.failed(error)
            else:
                self.outage.recovered()
                allowed, retry_ms, now_ms, denied, *remaining = result
                return Decision(bool(allowed), retry_ms / 1000, tuple(remaining), self, denied - 1, now_ms)
        if self.deny_when_down:
            self.metrics.unavailable.labels(self.name).inc()
            raise LimiterUnavailable(f"rate limiter {self.name!r} cannot reach redis")
        self.metrics.fallback_decisions.labels(self.name).inc()
        return self.fallback.acquire_now(charges)

    async def adjust(self, charges: Sequence[Charge], deltas: Sequence[int], stamp: int) -> None:
        """Queue the adjustment and return once it is in Redis: the adjustments of every request settling within
        `SETTLE_COALESCE_SECONDS` share one script call (one round trip instead of one per request)."""
        self._settlements += [(charge, delta, stamp) for charge, delta in zip(charges, deltas, strict=True)]
        if self._settling is None:
            self._settling = asyncio.get_running_loop().create_task(self._settle_queued())
        await asyncio.shield(self._settling)

    async def _settle_queued(self) -> None:
        await asyncio.sleep(SETTLE_COALESCE_SECONDS)
        queued, self._settlements, self._settling = self._settlements, [], None
        merged: dict[tuple[str, int], tuple[Charge, int, int]] = {}
        for charge, delta, stamp in queued:
            slot = stamp // max(charge.window_ms // WINDOW_SLOTS, 1) if charge.is_window else 0
            _, total, _ = merged.get((charge.key, slot), (charge, 0, stamp))
            merged[(charge.key, slot)] = (charge, total + delta, stamp)
        settled = [entry for entry in merged.values() if entry[1]]
        for start in range(0, len(settled), SETTLE_BATCH):
            batch = settled[start : start + SETTLE_BATCH]
            try:
                await self._call("adjust", *map(list, zip(*batch, strict=True)))
            except self.failures as error:
                logger.debug("rate limiter %s: %d settlements lost: %s", self.name, len(batch), error)

    async def close(self) -> None:
        """Settle what is queued, then close the connections."""
        if self._settling is not None:
            await self._settling
        await self.client.aclose()


def build_store(
    instance: PluginInstance | None, local: LocalStore, fallback: LocalStore, metrics: LimiterMetrics
) -> LocalStore | RedisWindowStore:
    """The counter store of the `rate_limiter` slot (none configured: `token_bucket_local`); raises
    `ConfigError` naming the key of a bad option."""
    if instance is None or canonical_kind("rate_limiter", instance.kind) == "token_bucket_local":
        if instance is not None:
            plugin_options(PluginOptions, instance, KEY)
        return local
    options = plugin_options(RedisWindowOptions, instance, KEY)
    return RedisWindowStore(instance.name, options, instance.failure_mode, fallback, metrics)
