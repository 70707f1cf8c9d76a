"""Guardrail state: request and spend counters per session, turn, subject-day and subject-minute, in memory or
in Redis (TTL per key kind), and the coalesced write-back of session counters to the registry.

A counter is a hash `{requests, cost_usd}`; Redis keys are `<key_prefix>guardrail:<kind>:<parts...>`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol
from urllib.parse import quote

from gatewayproxy.config.models import GuardrailSource, GuardrailState
from gatewayproxy.plugins.decisions import BackendError, post_json
from gatewayproxy.plugins.worker import Uninterrupted
from gatewayproxy.policy.sources import Session
from gatewayproxy.server.tasks import cancel_and_wait
from gatewayproxy.server.upstream import UpstreamPool

logger = logging.getLogger("gatewayproxy.policy")
WRITE_QUEUE_SIZE = 10000
FLUSH_QUEUE_SIZE = 64
DEFAULT_TTLS = GuardrailState(kind="memory")


@dataclass(frozen=True)
class Tally:
    """What one settled request adds: one request and its cost, for its subject, day, minute, session and turn."""

    subject: str
    day: str
    minute: str
    cost_usd: float
    session: Session | None = None
    turn: str | None = None

    def keys(self, ttls: GuardrailState) -> list[tuple[str, int]]:
        """Every counter key this request feeds, with its TTL in seconds."""
        keys = [
            (f"subject-day:{self.subject}:{self.day}", ttls.subject_day_ttl_secs),
            (f"subject-minute:{self.subject}:{self.minute}", ttls.subject_minute_ttl_secs),
        ]
        if self.session is not None:
            keys.append((session_key(self.session), ttls.session_ttl_secs))
            if self.turn:
                keys.append((f"{session_key(self.session)}:turn:{self.turn}", ttls.turn_ttl_secs))
        return keys


def session_key(session: Session) -> str:
    """The counter key of a registry session."""
    return f"session:{session.workspace}:{session.session}"


def day_key(subject: str, day: str) -> str:
    """The counter key of a subject's spend on a day."""
    return f"subject-day:{subject}:{day}"


class StateStore(Protocol):
    """Where counters live."""

    def record(self, tally: Tally) -> None:
        """Count a settled request; must not block."""

    async def spent(self, key: str) -> float:
        """The USD counted under `key`."""

    async def start(self) -> None:
        """Start background writing."""

    async def close(self) -> None:
        """Write what is queued and stop."""


class MemoryState:
    """Counters in this process (shared across snapshots); expired keys are pruned as new ones arrive."""

    def __init__(self, ttls: GuardrailState) -> None:
        self.ttls = ttls
        self._counters: dict[str, tuple[float, dict[str, float]]] = {}
        self._next_prune = 0.0

    def record(self, tally: Tally) -> None:
        now = time.monotonic()
        for key, ttl in tally.keys(self.ttls):
            expires, counter = self._counters.get(key, (0.0, {}))
            if expires <= now:
                counter = {"requests": 0, "cost_usd": 0.0}
            counter["requests"] += 1
            counter["cost_usd"] += tally.cost_usd
            self._counters[key] = (now + ttl, counter)
        if now >= self._next_prune:
            self._counters = {key: entry for key, entry in self._counters.items() if entry[0] > now}
            self._next_prune = now + self.ttls.subject_minute_ttl_secs

    async def spent(self, key: str) -> float:
        expires, counter = self._counters.get(key, (0.0, {}))
        return counter.get("cost_usd", 0.0) if expires > time.monotonic() else 0.0

    async def start(self) -> None:
        """Nothing runs in the background."""

    async def close(self) -> None:
        """Nothing is queued."""


class RedisState:
    """Counters in Redis: `record` queues, a writer task applies each tally in one pipeline (HINCRBY,
    HINCRBYFLOAT, EXPIRE per key) and offers the session's new totals to the write-back."""

    def __init__(self, config: GuardrailState, write_back: StateWriteBack | None) -> None:
        assert config.url is not None
        self.ttls = config
        self.prefix = config.key_prefix + "guardrail:"
        import redis.asyncio as redis  # with OpenTelemetry in tow: imported only where Redis state is configured

        self.failures = (redis.RedisError, OSError)
        self.client = redis.Redis.from_url(config.url)
        self.write_back = write_back
        self._queue: asyncio.Queue[Tally] = asyncio.Queue(WRITE_QUEUE_SIZE)
        self._task: asyncio.Task[None] | None = None
        self._writing = Uninterrupted()

    def record(self, tally: Tally) -> None:
        try:
            self._queue.put_nowait(tally)
        except asyncio.QueueFull:
            logger.error("guardrail state queue is full; a request's counters were dropped")

    async def spent(self, key: str) -> float:
        value = await self.client.hget(self.prefix + key, "cost_usd")
        return float(value) if value is not None else 0.0

    async def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._write_forever())
        if self.write_back is not None:
            await self.write_back.start()

    async def close(self) -> None:
        await cancel_and_wait(self._task)
        await self._writing.finish()
        while not self._queue.empty():
            await self._write(self._queue.get_nowait())
        if self.write_back is not None:
            await self.write_back.close()
        await self.client.aclose()

    async def _write_forever(self) -> None:
        while True:
            tally = await self._queue.get()
            await self._writing.run(self._write(tally))

    async def _write(self, tally: Tally) -> None:
        keys = tally.keys(self.ttls)
        try:
            async with self.client.pipeline(transaction=False) as pipeline:
                for key, ttl in keys:
                    pipeline.hincrby(self.prefix + key, "requests", 1)
                    pipeline.hincrbyfloat(self.prefix + key, "cost_usd", tally.cost_usd)
                    pipeline.expire(self.prefix + key, ttl)
                results = await pipeline.execute()
        except self.failures as error:
            logger.error("guardrail state write failed: %s", error)
            return
        if self.write_back is not None and tally.session is not None:
            at = [key for key, _ in keys].index(session_key(tally.session)) * 3
            self.write_back.offer(tally.session, {"requests": int(results[at]), "cost_usd": float(results[at + 1])})


class StateWriteBack:
    """Coalesces session totals and posts them every `flush_interval_ms` to the registry's guardrail-state
    endpoint; a full flush queue drops the new batch, a failed post is logged and not retried."""

    def __init__(self, source: GuardrailSource, state: GuardrailState, pool: UpstreamPool) -> None:
        assert source.base_url is not None
        self.root = source.base_url.rstrip("/")
        self.source = source
        self.interval = state.flush_interval_ms / 1000
        self.pool = pool
        self._pending: dict[Session, dict[str, Any]] = {}
        self._batches: asyncio.Queue[dict[Session, dict[str, Any]]] = asyncio.Queue(FLUSH_QUEUE_SIZE)
        self._tasks: list[asyncio.Task[None]] = []
        self._posting = Uninterrupted()
        self.dropped = 0

    def offer(self, session: Session, totals: dict[str, Any]) -> None:
        """The session's latest totals replace any not flushed yet."""
        self._pending[session] = totals

    def url(self, session: Session) -> str:
        """The registry's guardrail-state endpoint of a session."""
        return (
            f"{self.root}/internal/v1/workspaces/{quote(session.workspace, safe='')}/sessions/"
            f"{quote(session.session, safe='')}/guardrail-state"
        )

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._tick_forever()), loop.create_task(self._post_forever())]

    async def close(self) -> None:
        for task in self._tasks:
            await cancel_and_wait(task)
        await self._posting.finish()
        self._enqueue()
        while not self._batches.empty():
            await self._post(self._batches.get_nowait())

    async def _tick_forever(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            self._enqueue()

    def _enqueue(self) -> None:
        if not self._pending:
            return
        batch, self._pending = self._pending, {}
        try:
            self._batches.put_nowait(batch)
        except asyncio.QueueFull:
            self.dropped += 1
            logger.error("guardrail state flush queue is full; dropped a batch of %d sessions", len(batch))

    async def _post_forever(self) -> None:
        while True:
            batch = await self._batches.get()
            await self._posting.run(self._post(batch))

    async def _post(self, batch: dict[Session, dict[str, Any]]) -> None:
        updated_at = datetime.now(UTC).isoformat()
        for session, totals in batch.items():
            document = {"gateway_usage": totals, "updated_at": updated_at}
            try:
                await post_json(
                    self.pool, self.url(session), document, self.source.timeout_ms / 1000, self.source.bearer_token_file
                )
            except BackendError as error:
                logger.error("guardrail state write-back for session %s failed: %s", session.session, error)
