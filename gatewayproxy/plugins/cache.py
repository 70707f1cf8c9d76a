"""The `cache` plugin kinds: where exact-match response cache entries are kept.

`memory_exact` keeps entries in this process (a TTL and a bounded LRU); `redis_exact` keeps them in Redis, so
replicas and workers share them. A backend never raises to its caller: an unreachable or slow Redis (past
`timeout_ms`) is a miss on lookup and a lost entry on store, logged once per outage; while Redis is down it is
probed once per `retry_interval_ms` and every other lookup is a miss at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from typing import Any, Protocol

from pydantic import Field

from gatewayproxy.config.kinds import canonical_kind
from gatewayproxy.config.models import PluginInstance
from gatewayproxy.plugins.decisions import PluginOptions, plugin_options
from gatewayproxy.plugins.outage import Outage

logger = logging.getLogger("gatewayproxy.cache")
KEY = "plugins.cache"


class CacheOptions(PluginOptions):
    """Options every cache kind takes: `shared: true` lets every caller share entries (the key then leaves out
    the caller's scope)."""

    shared: bool = False
    ttl_secs: int = Field(default=300, gt=0)
    max_body_bytes: int = Field(default=1_048_576, gt=0)


class MemoryExactOptions(CacheOptions):
    """Options of `memory_exact`."""

    max_entries: int = Field(default=1024, gt=0)


class RedisExactOptions(CacheOptions):
    """Options of `redis_exact`."""

    url: str
    key_prefix: str = "gw:cache:"
    timeout_ms: int = Field(default=50, gt=0, le=5000)
    connect_timeout_ms: int = Field(default=200, gt=0, le=5000)
    retry_interval_ms: int = Field(default=1000, gt=0)
    max_connections: int = Field(default=32, gt=0)


class CacheBackend(Protocol):
    """Where entries live; `get` and `put` never raise (a failure is a miss, or an entry not kept)."""

    @property
    def options(self) -> CacheOptions:
        """The options every kind takes."""
        ...

    async def get(self, key: str) -> bytes | None:
        """The entry under `key`, if there is a fresh one."""

    async def put(self, key: str, entry: bytes) -> None:
        """Keep `entry` under `key` for `ttl_secs`."""

    async def close(self) -> None:
        """Release the backend's connections."""


class MemoryExactCache:
    """Entries in this process: `max_entries` at most (least recently used go first), each for `ttl_secs`."""

    def __init__(self, name: str, options: MemoryExactOptions) -> None:
        self.name = name
        self.options = options
        self.entries: OrderedDict[str, tuple[float, bytes]] = OrderedDict()

    def get_now(self, key: str) -> bytes | None:
        """`get` without awaiting."""
        found = self.entries.get(key)
        if found is None:
            return None
        if found[0] <= time.monotonic():
            del self.entries[key]
            return None
        self.entries.move_to_end(key)
        return found[1]

    async def get(self, key: str) -> bytes | None:
        return self.get_now(key)

    async def put(self, key: str, entry: bytes) -> None:
        self.put_now(key, entry)

    def put_now(self, key: str, entry: bytes) -> None:
        """`put` without awaiting."""
        self.entries[key] = (time.monotonic() + self.options.ttl_secs, entry)
        self.entries.move_to_end(key)
        while len(self.entries) > self.options.max_entries:
            self.entries.popitem(last=False)

    async def close(self) -> None:
        self.entries.clear()


class RedisExactCache:
    """Entries in Redis under `key_prefix` + the request's key, expiring after `ttl_secs`."""

    def __init__(self, name: str, options: RedisExactOptions) -> None:
        self.name = name
        self.options = options
        # redis-py is imported only where a Redis cache is configured (it brings OpenTelemetry along).
        import redis.asyncio as redis
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff
        from redis.exceptions import RedisError

        self.failures: tuple[type[BaseException], ...] = (RedisError, OSError, TimeoutError)
        pool = redis.ConnectionPool.from_url(
            options.url,
            max_connections=options.max_connections,
            socket_timeout=options.timeout_ms / 1000,
            socket_connect_timeout=min(options.connect_timeout_ms, options.timeout_ms) / 1000,
            retry=Retry(NoBackoff(), 0),
        )
        self.client: Any = redis.Redis.from_pool(pool)
        self.timeout = options.timeout_ms / 1000
        self.outage = Outage(f"cache {name}", options.retry_interval_ms / 1000, while_down="serving misses")

    async def get(self, key: str) -> bytes | None:
        if not self.outage.should_try():
            return None
        try:
            async with asyncio.timeout(self.timeout):
                found = await self.client.get(self.options.key_prefix + key)
        except self.failures as error:
            self.outage.failed(error)
            return None
        self.outage.recovered()
        return found if isinstance(found, bytes) else None

    async def put(self, key: str, entry: bytes) -> None:
        if not self.outage.should_try():
            return
        try:
            async with asyncio.timeout(self.timeout):
                await self.client.set(self.options.key_prefix + key, entry, ex=self.options.ttl_secs)
        except self.failures as error:
            self.outage.failed(error)
            return
        self.outage.recovered()

    async def close(self) -> None:
        with contextlib.suppress(*self.failures):
            await self.client.aclose()


def build_cache(instance: PluginInstance) -> MemoryExactCache | RedisExactCache:
    """The backend of the `cache` slot; raises `ConfigError` naming the key of a bad option."""
    if canonical_kind("cache", instance.kind) == "memory_exact":
        return MemoryExactCache(instance.name, plugin_options(MemoryExactOptions, instance, KEY))
    return RedisExactCache(instance.name, plugin_options(RedisExactOptions, instance, KEY))
