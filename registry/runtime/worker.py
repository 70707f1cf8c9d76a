"""The runtime worker of `runsessions`: claims sessions with work and runs up to N of them at once.

One dispatcher claims sessions (`log.claim`) while fewer than `concurrency` are running, and runs
each in a thread of a pool under its own fenced lease; a `LeaseKeeper` renews all leases in one
statement. It sleeps until LISTEN/NOTIFY (PostgreSQL), an embedded call, a finished session or the
safety-net poll wakes it. A notification about a session that is running here is handed to its
runner instead (an interrupt, an archive, a new message), so turns notice them at once.

SIGTERM (or SIGINT) drains: the worker stops claiming (`/readyz` answers 503), running turns stop at
their next checkpoint without writing, their leases are released and the other workers notified, so
one of them resumes each from the log at once. A session's lease is released only once its last
workspace snapshot landed (they land in the background after the turn's idle status), so a drain
waits for those in flight too. A turn or snapshot stuck past `REGISTRY_RUNTIME_DRAIN_SECONDS` (a
model's first byte, a package build, a slow store) is let go: its lease marked lost and released the
same way, its thread abandoned (`runsessions` then exits without waiting for it; its writes are fenced
out, its snapshot never becomes the latest). A second signal stops the process immediately. Turns,
tool calls, sandboxes and leases are counted for Prometheus (`MeteredObserver`, the backend's
`on_create`); the turn loop stays free of metrics.
"""

from __future__ import annotations

import logging
import os
import secrets
import signal
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from types import FrameType
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connection, transaction
from prometheus_client import Counter, Gauge, Histogram

from registry.core.observability import DatabaseGauge, HealthServer, database_reachable, log_ids
from registry.runtime.checkpoints import WorkerStopping
from registry.runtime.config import RuntimeSettings
from registry.runtime.eventlog import VisibleLogs
from registry.runtime.identity import ModelCallIdentity
from registry.runtime.lease import Claim, Lease, LeaseKeeper, LeaseLost
from registry.runtime.model import ModelClient
from registry.runtime.observer import Observers, TracingObserver, TurnObserver, TurnWatch
from registry.runtime.turns import SessionRunner
from registry.runtime.wakeups import NotificationListener, can_listen
from registry.runtime.writer import fail_turn
from registry.sandbox.backend import make_backend
from registry.sandbox.interface import SandboxBackend
from registry.sandbox.spec import SandboxUnavailable
from registry.sessions import log, notify, selectors, work
from registry.sessions.models import Session

logger = logging.getLogger(__name__)

STOP_SIGNALS = ("SIGTERM", "SIGINT")
# Without LISTEN (SQLite in separate processes) the poll is all there is: keep it short.
POLL_WITHOUT_LISTEN_SECONDS = 0.5
HEALTH_PORT = 9100

# -- metrics -------------------------------------------------------------------------------------
QUEUE_DEPTH = DatabaseGauge(
    "registry_runtime_queue_depth",
    "Sessions with work that no worker holds, counted when scraped (the same for every worker).",
    selectors.sessions_with_work_count,
)
WORK_QUEUE_DEPTH = DatabaseGauge(
    "registry_work_queue_depth",
    "Self-hosted work items queued and never polled, per environment (its work stats' depth).",
    work.queued_by_environment,
    labels=("environment_id",),
)
WORK_ITEMS_LIVE = DatabaseGauge(
    "registry_work_items_live",
    "Self-hosted work items queued, starting or active, per environment: one environment worker each.",
    work.live_by_environment,
    labels=("environment_id",),
)
LEASES_HELD = Gauge("registry_runtime_leases_held", "Sessions this worker holds a lease on.")
LEASE_LOSSES = Counter(
    "registry_runtime_lease_losses_total", "Leases lost under a running turn (renewed too late or taken over)."
)
TURNS_STARTED = Counter("registry_runtime_turns_started_total", "Turns started or resumed on this worker.")
TURNS_FINISHED = Counter(
    "registry_runtime_turns_finished_total",
    "Turns that ended on this worker, by outcome: the idle stop reason, or left, lease_lost, failed.",
    ["outcome"],
)
TURN_SECONDS = Histogram(
    "registry_runtime_turn_duration_seconds",
    "How long turns ran on this worker.",
    buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800),
)
TOOL_CALLS = Counter("registry_runtime_tool_calls_total", "Tool calls the model made, by kind.", ["kind"])
TOOL_ERRORS = Counter(
    "registry_runtime_tool_errors_total", "Tool results the runtime wrote with is_error, by kind.", ["kind"]
)
SANDBOX_STARTS = Counter(
    "registry_runtime_sandbox_starts_total", "Session sandboxes prepared on this worker (created or restored)."
)
TOOL_USE_KINDS = {"agent.tool_use": "builtin", "agent.mcp_tool_use": "mcp", "agent.custom_tool_use": "custom"}
TOOL_RESULT_KINDS = {"agent.tool_result": "builtin", "agent.mcp_tool_result": "mcp"}


class MeteredObserver(TurnObserver):
    """Counts this worker's turns (outcome, duration) and the tool calls and errors they write."""

    @contextmanager
    def turn(self, session_id: str, traceparent: str | None, watch: TurnWatch) -> Iterator[None]:
        TURNS_STARTED.inc()
        started = time.monotonic()
        try:
            yield
        finally:
            TURNS_FINISHED.labels(watch.outcome).inc()
            TURN_SECONDS.observe(time.monotonic() - started)

    def event_written(self, event_type: str, body: dict[str, Any]) -> None:
        if event_type in TOOL_USE_KINDS:
            kind = TOOL_USE_KINDS[event_type]
            transaction.on_commit(lambda: TOOL_CALLS.labels(kind).inc())  # not for a rolled-back write
        elif event_type in TOOL_RESULT_KINDS and body.get("is_error"):
            kind = TOOL_RESULT_KINDS[event_type]
            transaction.on_commit(lambda: TOOL_ERRORS.labels(kind).inc())


class WakeupListener(NotificationListener):
    """The LISTEN thread, and whether it still runs (for `/readyz`)."""

    def alive(self) -> bool:
        return self._thread.is_alive()


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


class Worker:
    """One runtime worker process (or thread, embedded); several share the load through leases."""

    def __init__(self, config: RuntimeSettings, *, embedded: bool = False) -> None:
        self.config = config
        self.embedded = embedded
        self.owner = worker_id()
        self.stopping = threading.Event()
        self.wake = threading.Event()
        self.model = ModelClient(base_url=settings.REGISTRY_MODEL_BASE_URL, config=config, pool_size=config.concurrency)
        self.identity = ModelCallIdentity()
        self.keeper = LeaseKeeper(owner=self.owner, seconds=config.lease_seconds)
        self.sandboxes = sandbox_backend()
        self.logs = VisibleLogs(sessions=config.concurrency)
        self.observer = Observers(MeteredObserver(), TracingObserver())
        self.runners: dict[str, SessionRunner] = {}
        # Sessions with a sandbox here that a notification named while no turn ran: maybe terminated.
        self.ended: set[str] = set()
        self.runners_lock = threading.Lock()
        self.sessions_run = 0
        self.listener: WakeupListener | None = None
        # Sessions whose turn was let go at the drain deadline, their threads still running.
        self.abandoned: list[str] = []

    # -- signals and wake-ups ------------------------------------------------------------------
    def stop(self, signum: int | None = None, frame: FrameType | None = None) -> None:
        """First signal: stop claiming, turns stop at their next checkpoint. A second one acts at once."""
        self.stopping.set()
        self.wake.set()
        if not self.embedded:
            for name in STOP_SIGNALS:
                signal.signal(getattr(signal, name), signal.SIG_DFL)

    def notified(self, session_id: str | None) -> None:
        """A session changed: its runner here looks at once; otherwise the dispatcher claims."""
        with self.runners_lock:
            runner = self.runners.get(session_id) if session_id else None
        if runner is not None:
            runner.attention.set()
        else:
            if session_id and self.sandboxes is not None and self.sandboxes.holds(session_id):
                self.ended.add(session_id)  # archived or deleted while idle? the dispatcher checks
            self.wake.set()

    def readiness(self) -> str | None:
        """Why this worker cannot take work now (draining, not listening, no database), or None."""
        if self.stopping.is_set():
            return "draining"
        if self.listener is not None and not self.listener.alive():
            return "the wake-up listener is down"
        return None if database_reachable() else "the database is unreachable"

    # -- the dispatcher ------------------------------------------------------------------------
    def run(self, *, once: bool = False, max_idle: float | None = None, health: HealthServer | None = None) -> None:
        """Claim and run until stopped; `once` runs one session, `max_idle` exits after that long idle.
        `health` is served while the worker runs, draining included."""
        if not self.embedded:
            for name in STOP_SIGNALS:
                signal.signal(getattr(signal, name), self.stop)
        listener = self.listener = WakeupListener(self.notified) if can_listen() else None
        poll = self.config.poll_seconds if listener else min(self.config.poll_seconds, POLL_WITHOUT_LISTEN_SECONDS)
        notify.add_local_runtime_listener(self.notified)
        self.keeper.start()
        if listener:
            listener.start()
        if health:
            health.start()
        logger.info(
            "runtime worker %s started (concurrency %d, health port %s)",
            self.owner,
            self.config.concurrency,
            health.port if health else "off",
        )
        pool = ThreadPoolExecutor(max_workers=self.config.concurrency, thread_name_prefix="session")
        idle_since = time.monotonic()
        try:
            while not self.stopping.is_set():
                self.wake.clear()
                self._tend_sandboxes()
                free = self.config.concurrency - self._running()
                claims = self._claim(limit=(0 if self.sessions_run else 1) if once else free)
                for claim in claims:
                    self._start(pool, claim)
                if claims or self._running():
                    idle_since = time.monotonic()
                if once and self.sessions_run and not self._running():
                    return
                if max_idle is not None and time.monotonic() - idle_since >= max_idle:
                    return
                self.wake.wait(poll)
        finally:
            self.stopping.set()
            notify.remove_local_runtime_listener(self.notified)
            self._drain()
            pool.shutdown(wait=not self.abandoned)
            if listener:
                listener.stop()
            self.keeper.stop()
            self.model.close()
            if self.sandboxes is not None:
                self.sandboxes.close()
            if health:
                health.stop()
            close_old_connections()
            logger.info("runtime worker %s stopped", self.owner)

    def _drain(self) -> None:
        """Wait up to REGISTRY_RUNTIME_DRAIN_SECONDS for running turns to leave, then let go of the rest."""
        deadline = time.monotonic() + float(settings.REGISTRY_RUNTIME_DRAIN_SECONDS)
        while self._running() and (left := deadline - time.monotonic()) > 0:
            self.wake.wait(min(left, 0.1))  # set by each `_finish`
            self.wake.clear()
        with self.runners_lock:
            stuck = [runner.lease for runner in self.runners.values()]
        for lease in stuck:
            logger.warning("session %s: its turn or snapshot did not end in time; letting it go", lease.session_id)
            lease.lost.set()  # a snapshot the abandoned thread still takes does not land once another worker may
            self.keeper.drop(lease)
            self.abandoned.append(lease.session_id)
            try:
                self._hand_over(lease)
            except Exception as error:  # the database is away: the lease expires on its own
                logger.warning("releasing %s failed: %s", lease.session_id, error)

    def _tend_sandboxes(self) -> None:
        """Stop idle sandboxes (files stay); destroy those of sessions terminated or deleted meanwhile."""
        if self.sandboxes is None:
            return
        self.sandboxes.stop_idle(settings.REGISTRY_SANDBOX_IDLE_SECONDS)
        while self.ended:
            self._destroy_if_ended(self.ended.pop())

    def _destroy_if_ended(self, session_id: str) -> None:
        try:
            status = selectors.session_status(session_id)
        except Exception as error:  # the database is away: the next notification or the idle stop covers it
            logger.warning("checking session %s failed: %s", session_id, error)
            return
        if status in (None, Session.Status.TERMINATED) and self.sandboxes is not None:
            self.sandboxes.destroy(session_id, forget=status is None)  # deleted: its snapshot goes too

    def _running(self) -> int:
        with self.runners_lock:
            return len(self.runners)

    def _claim(self, *, limit: int) -> list[Claim]:
        if limit <= 0:
            return []
        try:
            close_old_connections()
            return log.claim(owner=self.owner, seconds=self.config.lease_seconds, limit=limit)
        except Exception as error:  # the database is away: try again on the next wake-up or poll
            logger.warning("claiming sessions failed: %s", error)
            connection.close()
            return []

    def _start(self, pool: ThreadPoolExecutor, claim: Claim) -> None:
        lease = self.keeper.hold(claim)
        runner = SessionRunner(
            lease=lease,
            model=self.model,
            identity=self.identity,
            config=self.config,
            stopping=self.stopping,
            sandboxes=self.sandboxes,
            logs=self.logs,
            observer=self.observer,
        )
        with self.runners_lock:
            self.runners[lease.session_id] = runner
        self.sessions_run += 1
        LEASES_HELD.inc()
        pool.submit(self._run_session, runner, claim)

    def _run_session(self, runner: SessionRunner, claim: Claim) -> None:
        lease = runner.lease
        left_for_another = False
        with log_ids(session_id=lease.session_id):
            try:
                if claim.attempts > self.config.max_attempts:
                    fail_turn(lease, "The turn was abandoned by its worker too many times.", retry="exhausted")
                else:
                    runner.run()
            except (LeaseLost, WorkerStopping) as reason:
                left_for_another = isinstance(reason, WorkerStopping)
                if lease.lost.is_set():
                    LEASE_LOSSES.inc()
                logger.info("left session %s: %s", lease.session_id, reason)
            except Exception:
                logger.exception("session %s failed", lease.session_id)
                fail_turn(lease, "The runtime failed to run this turn.", retry="exhausted")
            finally:
                self._finish(lease, left_for_another)

    def _finish(self, lease: Lease, left_for_another: bool) -> None:
        self.keeper.drop(lease)
        try:
            if left_for_another:
                self._hand_over(lease)
            else:
                lease.release()
        except Exception as error:
            logger.warning("releasing %s failed (it expires on its own): %s", lease.session_id, error)
        finally:
            LEASES_HELD.dec()
            with self.runners_lock:
                self.runners.pop(lease.session_id, None)
            # Only now: an archive notified from here on finds no runner and is queued in `ended`, and one
            # notified before (to a runner past its last look) has committed, so this read sees it.
            if self.sandboxes is not None:
                self._destroy_if_ended(lease.session_id)
            connection.close()
            self.wake.set()

    @staticmethod
    def _hand_over(lease: Lease) -> None:
        """Release a session left at shutdown (not counted as an attempt) and wake the other workers for it."""
        lease.release(keep_attempt=False)
        notify.wake_runtime(lease.session_id)


def sandbox_backend() -> SandboxBackend | None:
    """The configured sandbox backend (counting the sandboxes it makes), or None (with one log line) when
    it is off or cannot start."""
    problem: str | None
    try:
        backend = make_backend(on_create=SANDBOX_STARTS.inc)
    except SandboxUnavailable as error:
        backend, problem = None, str(error)
    else:
        problem = backend.health() if backend is not None else None
    if problem is not None:
        logger.warning("no session sandboxes: %s; built-in tools are not offered", problem)
        return None
    return backend
