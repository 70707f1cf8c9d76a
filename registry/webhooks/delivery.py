"""The webhook sender of `runwebhooks`: fans outbox events out into deliveries, sends due deliveries, settles
the attempts. Several senders may share one outbox (PostgreSQL); on SQLite run one.

One asyncio loop runs four tasks; every database call runs in a database thread (`deliveries`, one short
transaction each: one thread for claims, one for settling attempts, one for fan-outs), so the ORM never blocks
the sends, and a large fan-out never holds up a claim:

- dispatch: every `REGISTRY_WEBHOOK_POLL_SECONDS` (at once while a batch came back full), fan out the oldest
  undispatched events (`deliveries.dispatch`);
- claim: lease due deliveries, each endpoint's oldest first, into one lane per endpoint (`Lane`); a lane sends
  at most `REGISTRY_WEBHOOK_ENDPOINT_CONCURRENCY` at once (one while its endpoint is failing) in event order, so
  a slow endpoint only ever holds its own lane; claims run again when a dispatch made work, a lane runs low or
  the poll comes round;
- send: one task per attempt (`sender.Sender`); the first failure of a lane stops it and lets its queued claims
  go, since the endpoint's backoff will hold them anyway;
- settle: record finished attempts in batches (`deliveries.settle`): retries, endpoint backoff and disabling.

SIGTERM (or SIGINT) drains: no more claims, queued claims are released, in-flight requests finish (each is
bounded by the request timeout), their attempts are settled, then the process exits. A killed sender's claims
are taken by another once their lease lapses, so only the requests that were in flight are sent twice, with
the same `webhook-id`. A second signal stops the process at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import secrets
import signal
import socket
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from types import FrameType
from typing import Any, TypeVar

import uvloop
from django.db import DatabaseError, connection
from django.utils import timezone

from registry.core.egress import runtime_rules
from registry.core.observability import HealthServer, database_reachable
from registry.webhooks import deliveries, metrics
from registry.webhooks.config import DISPATCH_BATCH, LEASE_MARGIN_SECONDS, PREFETCH_FACTOR, RECORD_BATCH, DeliveryConfig
from registry.webhooks.deliveries import Claim
from registry.webhooks.sender import Message, Sender, SendResult

logger = logging.getLogger(__name__)

STOP_SIGNALS = ("SIGTERM", "SIGINT")
HEALTH_PORT = 9102
PRUNE_EVERY_SECONDS = 3600.0
SWEEP_EVERY_SECONDS = 60.0
SETTLE_TRIES = 12  # about half a minute of retries (a database restart) before a batch is let go
T = TypeVar("T")


def sender_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


@dataclass
class Lane:
    """The claims this sender holds for one endpoint: queued in event order, at most `limit` in flight.

    `more`: its last claim filled the room it was given (more is probably due). `blocked`: an attempt failed and
    is not settled yet, so nothing more is claimed for it until the endpoint's backoff is in the database."""

    endpoint_id: str
    limit: int
    queue: deque[Claim] = field(default_factory=deque)
    in_flight: int = 0
    more: bool = False
    blocked: bool = False

    @property
    def held(self) -> int:
        return len(self.queue) + self.in_flight


class Deliverer:
    """One sender process (see the module's docstring)."""

    def __init__(self, config: DeliveryConfig, *, owner: str | None = None) -> None:
        self.config = config
        self.owner = owner or sender_id()
        self.stopping = threading.Event()
        self.lanes: dict[str, Lane] = {}
        self.in_flight = 0
        self.saturated = False  # a lane waits for a free slot of the process-wide bound
        self.sends: set[asyncio.Task[None]] = set()
        self.background: set[asyncio.Task[Any]] = set()
        # Three database threads, each with its connection, so that no kind of work waits behind another: the
        # queue's (claims, releases), the settling one (attempts), the outbox's (fan-outs, pruning).
        self.database = ThreadPoolExecutor(max_workers=1, thread_name_prefix="webhook-queue")
        self.outbox = ThreadPoolExecutor(max_workers=1, thread_name_prefix="webhook-outbox")
        self.settling = ThreadPoolExecutor(max_workers=1, thread_name_prefix="webhook-settle")
        self.sender = Sender(timeout=config.timeout_seconds, rules=runtime_rules)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.stopped = asyncio.Event()
        self.wake = asyncio.Event()
        self.finished: asyncio.Queue[tuple[Claim, SendResult] | None] = asyncio.Queue()

    # -- signals and readiness -------------------------------------------------------------------------
    def stop(self, signum: int | None = None, frame: FrameType | None = None) -> None:
        """First signal: drain. A second one acts at once (the default handlers are back)."""
        self.stopping.set()
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self.stopped.set)
        if threading.current_thread() is threading.main_thread():
            for name in STOP_SIGNALS:
                signal.signal(getattr(signal, name), signal.SIG_DFL)

    def readiness(self) -> str | None:
        """Why this sender cannot deliver now (draining, no database), or None."""
        if self.stopping.is_set():
            return "draining"
        return None if database_reachable() else "the database is unreachable"

    # -- the process -----------------------------------------------------------------------------------
    def run(self, *, health: HealthServer | None = None) -> None:
        """Deliver until stopped; `health` is served meanwhile, draining included."""
        if threading.current_thread() is threading.main_thread():
            for name in STOP_SIGNALS:
                signal.signal(getattr(signal, name), self.stop)
        if health:
            health.start()
        logger.info(
            "webhook sender %s started (%d per endpoint, %d in all, health port %s)",
            self.owner,
            self.config.endpoint_concurrency,
            self.config.concurrency,
            health.port if health else "off",
        )
        try:
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                runner.run(self._main())
        finally:
            for executor in (self.database, self.outbox, self.settling):
                executor.submit(close_connection).result()
                executor.shutdown()
            if health:
                health.stop()
            logger.info("webhook sender %s stopped", self.owner)

    async def _main(self) -> None:
        self.loop = asyncio.get_running_loop()
        if self.stopping.is_set():
            return
        loops = [
            asyncio.create_task(self._dispatch_loop(), name="dispatch"),
            asyncio.create_task(self._claim_loop(), name="claim"),
            asyncio.create_task(self._housekeeping_loop(), name="housekeeping"),
        ]
        settling = asyncio.create_task(self._settle_loop(), name="settle")
        await self.stopped.wait()
        # Drain: the loops end after their current pass; queued claims go back; in-flight requests finish.
        await asyncio.gather(*loops)
        self._release([claim for lane in self.lanes.values() for claim in lane.queue])
        for lane in self.lanes.values():
            lane.queue.clear()
        if self.sends:
            _, late = await asyncio.wait(set(self.sends), timeout=self.config.timeout_seconds + LEASE_MARGIN_SECONDS)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        self.finished.put_nowait(None)
        await settling
        await asyncio.gather(*self.background, return_exceptions=True)
        self.sender.close()

    async def _database(
        self, function: Callable[..., T], /, *args: Any, thread: ThreadPoolExecutor | None = None, **kwargs: Any
    ) -> T | None:
        """`function` in a database thread (the queue's unless `thread` says); None (logged) when the database
        failed it."""
        assert self.loop is not None
        call = partial(in_database, function, *args, **kwargs)
        try:
            return await self.loop.run_in_executor(thread or self.database, call)
        except Exception:  # the database, or a bug: logged, and the loop goes on (a claim's lease lapses)
            logger.exception("webhook sender: %s failed", getattr(function, "__name__", function))
            return None

    async def _pause(self, seconds: float, *, wake: bool = False) -> None:
        """Wait `seconds`, less if stopped (or, with `wake`, woken)."""
        waits = [asyncio.ensure_future(self.stopped.wait())]
        if wake:
            waits.append(asyncio.ensure_future(self.wake.wait()))
        try:
            await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()

    # -- dispatch --------------------------------------------------------------------------------------
    async def _dispatch_loop(self) -> None:
        while not self.stopping.is_set():
            dispatched = await self._database(deliveries.dispatch, thread=self.outbox)
            if dispatched is not None and dispatched.events:
                metrics.EVENTS_DISPATCHED.inc(dispatched.events)
                if dispatched.deliveries:
                    self.wake.set()
            if dispatched is None or dispatched.events < DISPATCH_BATCH:
                await self._pause(self.config.poll_seconds)

    # -- claims and lanes ------------------------------------------------------------------------------
    async def _claim_loop(self) -> None:
        hold_limit = self.config.concurrency * PREFETCH_FACTOR
        while not self.stopping.is_set():
            self.wake.clear()
            room = hold_limit - sum(lane.held for lane in self.lanes.values())
            if room > 0:
                held = {endpoint_id: lane.held for endpoint_id, lane in self.lanes.items() if lane.held}
                blocked = {endpoint_id for endpoint_id, lane in self.lanes.items() if lane.blocked}
                claims = await self._database(
                    deliveries.claim, owner=self.owner, config=self.config, held=held, blocked=blocked, room=room
                )
                if claims and self.stopping.is_set():
                    self._release(claims)
                    return
                if claims:
                    self._take(claims, held)
            await self._pause(self.config.poll_seconds, wake=True)

    def _take(self, claims: list[Claim], held_before: dict[str, int]) -> None:
        counts: dict[str, int] = {}
        refused: list[Claim] = []
        for claim in claims:
            lane = self.lanes.get(claim.endpoint_id)
            if lane is not None and lane.blocked:  # it failed while this claim was on its way: its backoff decides
                refused.append(claim)
                continue
            limit = 1 if claim.failing else self.config.endpoint_concurrency
            if lane is None:
                lane = self.lanes[claim.endpoint_id] = Lane(claim.endpoint_id, limit)
            lane.limit = limit
            lane.queue.append(claim)
            counts[claim.endpoint_id] = counts.get(claim.endpoint_id, 0) + 1
        self._release(refused)
        for endpoint_id, count in counts.items():
            lane = self.lanes[endpoint_id]
            hold = lane.limit * PREFETCH_FACTOR if lane.limit > 1 else 1
            lane.more = count >= hold - held_before.get(endpoint_id, 0)
            self._pump(lane)

    def _pump(self, lane: Lane) -> None:
        """Start sends from the lane's queue while it and the process have room."""
        stale: list[Claim] = []
        now = timezone.now()
        while lane.queue and not lane.blocked and not self.stopping.is_set() and lane.in_flight < lane.limit:
            if self.in_flight >= self.config.concurrency:
                self.saturated = True
                break
            claim = lane.queue.popleft()
            if (claim.lease_until - now).total_seconds() < self.config.timeout_seconds + LEASE_MARGIN_SECONDS:
                stale.append(claim)  # it could outlive its lease in flight: another sender may take it
                continue
            lane.in_flight += 1
            self.in_flight += 1
            task = asyncio.create_task(self._send(lane, claim))
            self.sends.add(task)
            task.add_done_callback(self.sends.discard)
        self._release(stale)
        if lane.more and lane.held <= lane.limit:
            self.wake.set()
        self._forget_if_idle(lane)

    def _forget_if_idle(self, lane: Lane) -> None:
        if not lane.held and not lane.blocked and self.lanes.get(lane.endpoint_id) is lane:
            del self.lanes[lane.endpoint_id]

    async def _send(self, lane: Lane, claim: Claim) -> None:
        metrics.IN_FLIGHT.inc()
        try:
            message = Message(claim.url, claim.webhook_id, claim.body, claim.secret, owner=claim.endpoint_id)
            result = await self.sender.send(message)
        except asyncio.CancelledError:  # the drain's deadline: it may have arrived, or not; let it go
            self._release([claim])
            raise
        finally:
            metrics.IN_FLIGHT.dec()
            lane.in_flight -= 1
            self.in_flight -= 1
        metrics.ATTEMPTS.labels(result.outcome).inc()
        if result.succeeded and not claim.manual:
            metrics.DELIVERY_LAG.observe(max((result.started_at - claim.event_created_at).total_seconds(), 0.0))
        if not result.succeeded and not lane.blocked:
            lane.blocked = True
            lane.more = False
            self._release(list(lane.queue))
            lane.queue.clear()
        self.finished.put_nowait((claim, result))
        self._pump(lane)
        if self.saturated and self.in_flight < self.config.concurrency:
            self.saturated = False
            for other in list(self.lanes.values()):
                if other.queue:
                    self._pump(other)

    def _release(self, claims: list[Claim]) -> None:
        if claims:
            ids = [claim.delivery_id for claim in claims]
            self._background(self._database(deliveries.release, ids, owner=self.owner))

    def _background(self, coroutine: Any) -> None:
        task = asyncio.ensure_future(coroutine)
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    # -- settling --------------------------------------------------------------------------------------
    async def _settle_loop(self) -> None:
        while True:
            item = await self.finished.get()
            last = item is None
            batch = [item] if item is not None else []
            while not last and len(batch) < RECORD_BATCH and not self.finished.empty():
                item = self.finished.get_nowait()
                if item is None:
                    last = True
                else:
                    batch.append(item)
            if batch:
                await self._settle(batch)
            if last:
                return

    async def _settle(self, batch: list[tuple[Claim, SendResult]]) -> None:
        tries = 0
        while (
            settled := await self._database(
                deliveries.settle, batch, owner=self.owner, config=self.config, thread=self.settling
            )
        ) is None:
            tries += 1
            if tries >= (3 if self.stopping.is_set() else SETTLE_TRIES):
                # Their leases lapse and they are sent again: at least once, the same webhook-id.
                logger.error("webhook sender: %d attempts could not be recorded", len(batch))
                for endpoint_id in {claim.endpoint_id for claim, _ in batch}:
                    if (lane := self.lanes.get(endpoint_id)) is not None:
                        lane.blocked = False
                        self._pump(lane)
                return
            await asyncio.sleep(min(0.1 * 2**tries, 5.0))
        metrics.FAILED_DELIVERIES.inc(settled.failed_deliveries)
        metrics.ENDPOINTS_DISABLED.inc(len(settled.disabled))
        for endpoint_id in settled.disabled:
            logger.warning("webhook endpoint %s disabled after sustained failure", endpoint_id)
        for endpoint_id in {claim.endpoint_id for claim, result in batch if not result.succeeded}:
            lane = self.lanes.get(endpoint_id)
            if lane is not None:
                lane.blocked = False  # its backoff is in the database now
                self._pump(lane)
        self.wake.set()

    # -- housekeeping ----------------------------------------------------------------------------------
    async def _housekeeping_loop(self) -> None:
        """Close idle connection pools every minute; prune old rows hourly (the first time within the hour,
        at a random moment, so senders started together do not prune together)."""
        next_prune = asyncio.get_running_loop().time() + random.uniform(60.0, PRUNE_EVERY_SECONDS)
        while not self.stopping.is_set():
            await self._pause(SWEEP_EVERY_SECONDS)
            if self.stopping.is_set():
                return
            self.sender.close_idle()
            if asyncio.get_running_loop().time() >= next_prune:
                next_prune += PRUNE_EVERY_SECONDS
                pruned = await self._database(
                    deliveries.prune, retention_days=self.config.retention_days, thread=self.outbox
                )
                if pruned is not None and (pruned.deliveries or pruned.events):
                    logger.info("pruned %d webhook deliveries and %d events", pruned.deliveries, pruned.events)


def close_connection() -> None:
    """Close this thread's connection (`connection` is looked up in the calling thread)."""
    connection.close()


def in_database(function: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """Run in the database thread; a failed connection is closed, so the next call opens a fresh one."""
    try:
        return function(*args, **kwargs)
    except DatabaseError:
        with contextlib.suppress(DatabaseError):
            connection.close()
        raise
