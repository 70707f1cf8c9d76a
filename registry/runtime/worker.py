"""The runtime worker of `runsessions`: claims sessions with work and runs up to N of them at once.

One dispatcher claims sessions (`claim_batch`) while fewer than `concurrency` are running, and runs
each in a thread of a pool under its own fenced lease; a `LeaseKeeper` renews all leases in one
statement. It sleeps until LISTEN/NOTIFY (PostgreSQL), an embedded call, a finished session or the
safety-net poll wakes it. A notification about a session that is running here is handed to its
runner instead (an interrupt, an archive, a new message), so turns notice them at once.

SIGTERM (or SIGINT) stops claiming; running turns stop at their next checkpoint without writing,
their leases released, so another worker resumes them from the log at once. A second signal stops
the process immediately.
"""

from __future__ import annotations

import logging
import os
import secrets
import signal
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from types import FrameType

from django.conf import settings
from django.db import close_old_connections, connection

from registry.runtime.config import RuntimeSettings
from registry.runtime.harness import SessionRunner, WorkerStopping, fail_turn
from registry.runtime.identity import ModelCallIdentity
from registry.runtime.lease import Claim, Lease, LeaseKeeper, LeaseLost, claim_batch
from registry.runtime.model import ModelClient
from registry.runtime.wakeups import NotificationListener, can_listen
from registry.sandbox.backend import BwrapBackend, SandboxUnavailable, bwrap_path, make_backend
from registry.sessions import notify
from registry.sessions.models import Session

logger = logging.getLogger(__name__)

STOP_SIGNALS = ("SIGTERM", "SIGINT")
# Without LISTEN (SQLite in separate processes) the poll is all there is: keep it short.
POLL_WITHOUT_LISTEN_SECONDS = 0.5


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
        self.runners: dict[str, SessionRunner] = {}
        # Sessions with a sandbox here that a notification named while no turn ran: maybe terminated.
        self.ended: set[str] = set()
        self.runners_lock = threading.Lock()
        self.sessions_run = 0

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
            if session_id and self.sandboxes is not None and session_id in self.sandboxes.sandboxes:
                self.ended.add(session_id)  # archived or deleted while idle? the dispatcher checks
            self.wake.set()

    # -- the dispatcher ------------------------------------------------------------------------
    def run(self, *, once: bool = False, max_idle: float | None = None) -> None:
        """Claim and run until stopped; `once` runs one session, `max_idle` exits after that long idle."""
        if not self.embedded:
            for name in STOP_SIGNALS:
                signal.signal(getattr(signal, name), self.stop)
        listener = NotificationListener(self.notified) if can_listen() else None
        poll = self.config.poll_seconds if listener else min(self.config.poll_seconds, POLL_WITHOUT_LISTEN_SECONDS)
        notify.add_local_runtime_listener(self.notified)
        self.keeper.start()
        if listener:
            listener.start()
        logger.info("runtime worker %s started (concurrency %d)", self.owner, self.config.concurrency)
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
            pool.shutdown(wait=True)
            if listener:
                listener.stop()
            self.keeper.stop()
            self.model.close()
            close_old_connections()
            logger.info("runtime worker %s stopped", self.owner)

    def _tend_sandboxes(self) -> None:
        """Stop idle sandboxes (files stay); destroy those of sessions terminated or deleted meanwhile."""
        if self.sandboxes is None:
            return
        self.sandboxes.stop_idle(settings.REGISTRY_SANDBOX_IDLE_SECONDS)
        while self.ended:
            self._destroy_if_ended(self.ended.pop())

    def _destroy_if_ended(self, session_id: str) -> None:
        try:
            status = Session.objects.filter(pk=session_id).values_list("status", flat=True).first()
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
            return claim_batch(owner=self.owner, seconds=self.config.lease_seconds, limit=limit)
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
        )
        with self.runners_lock:
            self.runners[lease.session_id] = runner
        self.sessions_run += 1
        pool.submit(self._run_session, runner, claim)

    def _run_session(self, runner: SessionRunner, claim: Claim) -> None:
        lease = runner.lease
        left_for_another = False
        try:
            if claim.attempts > self.config.max_attempts:
                fail_turn(lease, "The turn was abandoned by its worker too many times.", retry="exhausted")
            else:
                runner.run()
        except (LeaseLost, WorkerStopping) as reason:
            left_for_another = isinstance(reason, WorkerStopping)
            logger.info("left session %s: %s", lease.session_id, type(reason).__name__)
        except Exception:
            logger.exception("session %s failed", lease.session_id)
            fail_turn(lease, "The runtime failed to run this turn.", retry="exhausted")
        finally:
            self._finish(lease, left_for_another)

    def _finish(self, lease: Lease, left_for_another: bool) -> None:
        self.keeper.drop(lease)
        if self.sandboxes is not None:
            self._destroy_if_ended(lease.session_id)
        try:
            lease.release(keep_attempt=not left_for_another)
        except Exception as error:
            logger.warning("releasing %s failed (it expires on its own): %s", lease.session_id, error)
        finally:
            with self.runners_lock:
                self.runners.pop(lease.session_id, None)
            connection.close()
            self.wake.set()


def sandbox_backend() -> BwrapBackend | None:
    """The configured sandbox backend, or None (with one log line) when it is off or cannot start."""
    try:
        backend = make_backend()
        if backend is not None:
            bwrap_path()
        return backend
    except SandboxUnavailable as error:
        logger.warning("no session sandboxes: %s; built-in tools are not offered", error)
        return None
