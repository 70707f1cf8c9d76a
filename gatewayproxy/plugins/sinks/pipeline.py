"""The path from `settle` to a sink: a bounded queue filled without blocking, a writer task that batches by
size and time, the spool for what the sink cannot take, a retry task that replays it, and the sink metrics."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

import orjson
from prometheus_client import CollectorRegistry, Counter, Gauge

from gatewayproxy.plugins.sinks.base import Record, Sink, SinkError, SinkOptions, SinkRejected
from gatewayproxy.plugins.sinks.spool import Spool

logger = logging.getLogger("gatewayproxy.sinks")
LOG_INTERVAL_SECONDS = 5.0


class SinkMetrics:
    """Queue depth, spool size and record outcomes (`written`, `replayed`, `spooled`, `dropped`) per sink."""

    def __init__(self, registry: CollectorRegistry) -> None:
        labels = ["slot", "sink"]
        self.queue_depth = Gauge(
            "gateway_sink_queue_depth", "Records waiting in a sink's queue.", labels, registry=registry
        )
        self.spool_events = Gauge(
            "gateway_sink_spool_events", "Records held in a sink's spool.", labels, registry=registry
        )
        self.records = Counter(
            "gateway_sink_records",
            "Records by outcome: written, replayed (from the spool), spooled, dropped.",
            [*labels, "outcome"],
            registry=registry,
        )


class SinkPipeline:
    """One sink instance behind its queue; `offer` never blocks and never raises."""

    def __init__(self, slot: str, name: str, sink: Sink, options: SinkOptions, metrics: SinkMetrics) -> None:
        self.slot, self.name, self.sink, self.options = slot, name, sink, options
        self.spool = Spool(options.spool.directory, options.spool.max_events) if options.spool else None
        self.queue: asyncio.Queue[Record] = asyncio.Queue(options.queue_size)
        self.failing = False
        self._overflow: list[Record] = []
        self._overflow_ready = asyncio.Event()
        self._in_flight: list[Record] = []
        self._write_lock = asyncio.Lock()
        self._spool_lock = asyncio.Lock()
        self._tasks: list[asyncio.Task[None]] = []
        self._closed = False
        self._last_logged: dict[str, float] = {}
        self._depth = metrics.queue_depth.labels(slot, name)
        self._spooled_gauge = metrics.spool_events.labels(slot, name)
        self._outcomes = {
            outcome: metrics.records.labels(slot, name, outcome)
            for outcome in ("written", "replayed", "spooled", "dropped")
        }
        self._spooled_gauge.set(self.spool.count if self.spool else 0)

    async def start(self) -> None:
        """Start the writer (and, with a spool, the spooler and the replay of anything spooled before)."""
        loops: list[Callable[[], Coroutine[Any, Any, None]]] = [self._write_loop]
        if self.spool is not None:
            loops += [self._overflow_loop, self._replay_loop]
        self._tasks = [asyncio.create_task(loop(), name=f"sink {self.slot}.{self.name}") for loop in loops]

    def offer(self, record: Record) -> None:
        """Queue a record for the sink; a full queue sends it to the spool, a full spool drops it."""
        if not self.sink.accepts(record):
            return
        if self._closed:
            self._spool_now([record])
            return
        try:
            self.queue.put_nowait(record)
        except asyncio.QueueFull:
            self._overflow_to_spool(record)
        self._depth.set(self.queue.qsize())

    async def close(self) -> None:
        """Stop the tasks and flush what is pending to the sink, or to the spool once `close_timeout_ms` has
        passed or the sink fails."""
        self._closed = True
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        pending = self._in_flight + self._overflow + self._drain_queue()
        self._in_flight, self._overflow = [], []
        written = 0
        try:
            async with asyncio.timeout(self.options.close_timeout_ms / 1000):
                while written < len(pending) and not (self.failing and self.spool is not None):
                    batch = pending[written : written + self.options.batch_size]
                    await self._write(batch, "written")
                    written += len(batch)
        except (SinkError, TimeoutError):
            pass
        self._spool_now(pending[written:])
        if self.spool is not None:
            self.spool.seal()
        await self.sink.close()

    def _drain_queue(self) -> list[Record]:
        records = []
        while not self.queue.empty():
            records.append(self.queue.get_nowait())
        self._depth.set(0)
        return records

    async def _write_loop(self) -> None:
        while True:
            await self._deliver(await self._next_batch())
            self._in_flight = []

    async def _next_batch(self) -> list[Record]:
        """The next batch: as soon as `batch_size` records wait, else what arrived within `flush_interval_ms`
        of the first. It is `_in_flight` from its first record on, so `close` finds it wherever it was."""
        batch = self._in_flight = [await self.queue.get()]
        if self.queue.qsize() + 1 < self.options.batch_size:
            await asyncio.sleep(self.options.flush_interval_ms / 1000)
        while len(batch) < self.options.batch_size and not self.queue.empty():
            batch.append(self.queue.get_nowait())
        self._depth.set(self.queue.qsize())
        return batch

    async def _deliver(self, batch: list[Record]) -> None:
        if self.failing and self.spool is not None:
            await self._to_spool(batch)
            return
        try:
            await self._write(batch, "written")
        except SinkError:
            await self._to_spool(batch)

    async def _write(self, batch: list[Record], outcome: str) -> None:
        """One batch to the sink within `write_timeout_ms`; any failure becomes `SinkError` (and is logged)."""
        try:
            async with self._write_lock, asyncio.timeout(self.options.write_timeout_ms / 1000):
                await self.sink.write(batch)
        except SinkRejected as error:
            self.failing = False
            self._drop(len(batch), f"the sink rejected them: {error}")
            return
        except Exception as error:
            self.failing = True
            reason = "timed out" if isinstance(error, TimeoutError) else f"{type(error).__name__}: {error}"
            self._log("failed", f"{self.slot} sink {self.name!r} failed to write {len(batch)} records: {reason}")
            raise SinkError(reason) from None
        self.failing = False
        self._outcomes[outcome].inc(len(batch))

    async def _to_spool(self, batch: list[Record]) -> None:
        if self.spool is None:
            self._drop(len(batch), "the sink failed and it has no spool")
            return
        async with self._spool_lock:
            await asyncio.to_thread(self._spool_now, batch)

    def _spool_now(self, batch: list[Record]) -> None:
        """Append to the spool what fits, dropping (and counting) the rest; blocking."""
        if not batch:
            return
        if self.spool is None:
            self._drop(len(batch), "the sink is closed and it has no spool")
            return
        kept = batch[: self.spool.room()]
        if len(kept) < len(batch):
            self._drop(len(batch) - len(kept), f"the spool is full ({self.spool.max_events} events)")
        if not kept:
            return
        try:
            self.spool.append([orjson.dumps(record) for record in kept])
        except OSError as error:
            self._drop(len(kept), f"the spool cannot be written: {error.strerror}")
            return
        self._outcomes["spooled"].inc(len(kept))
        self._spooled_gauge.set(self.spool.count)

    def _overflow_to_spool(self, record: Record) -> None:
        if self.spool is None or len(self._overflow) >= self.spool.room():
            self._drop(1, "the queue is full" + ("" if self.spool is None else " and so is the spool"))
            return
        self._overflow.append(record)
        self._overflow_ready.set()

    async def _overflow_loop(self) -> None:
        while True:
            await self._overflow_ready.wait()
            self._overflow_ready.clear()
            batch, self._overflow = self._overflow, []
            await self._to_spool(batch)

    async def _replay_loop(self) -> None:
        assert self.spool is not None
        while True:
            if self.spool.count or self.failing:
                await self._replay(self.spool)
            await asyncio.sleep(self.spool_retry_seconds)

    @property
    def spool_retry_seconds(self) -> float:
        """How long the replay task waits between attempts."""
        assert self.options.spool is not None
        return self.options.spool.retry_interval_ms / 1000

    async def _replay(self, spool: Spool) -> None:
        """Write every spool file this process can claim to the sink, deleting what was written; stops at the
        first failure."""
        async with self._spool_lock:
            await asyncio.to_thread(spool.seal)
            paths = await asyncio.to_thread(spool.files)
        for path in paths:
            async with self._spool_lock:
                claim = await asyncio.to_thread(spool.claim, path)
            if claim is None:
                continue
            delivered = 0
            try:
                for start in range(0, len(claim.lines), self.options.batch_size):
                    lines = claim.lines[start : start + self.options.batch_size]
                    await self._write([orjson.loads(line) for line in lines], "replayed")
                    delivered += len(lines)
            except SinkError:
                return
            finally:
                async with self._spool_lock:
                    await asyncio.to_thread(spool.release, claim, delivered)
                self._spooled_gauge.set(spool.count)
        self.failing = False

    def _drop(self, count: int, reason: str) -> None:
        self._outcomes["dropped"].inc(count)
        self._log("dropped", f"{self.slot} sink {self.name!r} dropped {count} records: {reason}")

    def _log(self, topic: str, message: str) -> None:
        """A warning, at most one per LOG_INTERVAL_SECONDS per sink and topic, so an outage cannot flood the
        log."""
        now = time.monotonic()
        if now - self._last_logged.get(topic, -LOG_INTERVAL_SECONDS) >= LOG_INTERVAL_SECONDS:
            self._last_logged[topic] = now
            logger.warning("%s", message)
