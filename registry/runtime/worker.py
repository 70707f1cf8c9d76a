"""The worker loop of `runsessions`: claim a session with work, run it under a lease, release, repeat.

SIGTERM (or SIGINT) stops the loop at the next checkpoint (between stream events and steps): a turn
in flight is abandoned without writing and its lease released, so another worker resumes it from
the log at once. A second signal stops the process immediately.
"""

from __future__ import annotations

import logging
import os
import secrets
import signal
import socket
import threading
import time
from types import FrameType

from django.conf import settings
from django.db import close_old_connections

from registry.runtime.config import RuntimeSettings
from registry.runtime.harness import SessionRunner, WorkerStopping
from registry.runtime.lease import Lease, LeaseLost, claim_next
from registry.runtime.model import ModelClient
from registry.sessions import services
from registry.sessions.models import Session

logger = logging.getLogger(__name__)

STOP_SIGNALS = ("SIGTERM", "SIGINT")


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


class Worker:
    """One runtime worker; several share the load through leases."""

    def __init__(self, config: RuntimeSettings) -> None:
        self.config = config
        self.owner = worker_id()
        self.stopping = threading.Event()
        self.model = ModelClient(
            base_url=settings.REGISTRY_MODEL_BASE_URL, api_key=settings.REGISTRY_MODEL_API_KEY, config=config
        )

    def stop(self, signum: int | None = None, frame: FrameType | None = None) -> None:
        """First signal: stop at the next checkpoint. A second one acts at once (default handlers)."""
        self.stopping.set()
        for name in STOP_SIGNALS:
            signal.signal(getattr(signal, name), signal.SIG_DFL)

    def run(self, *, once: bool = False, max_idle: float | None = None) -> None:
        """Poll for work until stopped; `once` runs one session, `max_idle` exits after that long idle."""
        for name in STOP_SIGNALS:
            signal.signal(getattr(signal, name), self.stop)
        logger.info("runtime worker %s started", self.owner)
        idle_since = time.monotonic()
        try:
            while not self.stopping.is_set():
                close_old_connections()
                session_id = claim_next(owner=self.owner, seconds=self.config.lease_seconds)
                if session_id is not None:
                    self.run_session(session_id)
                    idle_since = time.monotonic()
                    if once:
                        return
                elif max_idle is not None and time.monotonic() - idle_since >= max_idle:
                    return
                else:
                    self.stopping.wait(self.config.poll_seconds)
        finally:
            self.model.close()
            logger.info("runtime worker %s stopped", self.owner)

    def run_session(self, session_id: str) -> None:
        with Lease(session_id=session_id, owner=self.owner, seconds=self.config.lease_seconds) as lease:
            try:
                runner = SessionRunner(
                    session_id=session_id, lease=lease, model=self.model, config=self.config, stopping=self.stopping
                )
                runner.run()
            except (LeaseLost, WorkerStopping) as reason:
                logger.info("left session %s: %s", session_id, type(reason).__name__)
            except Exception:
                logger.exception("session %s failed", session_id)
                fail_session(session_id)


def fail_session(session_id: str) -> None:
    """An unexpected failure ends the turn with `session.error`, so the session is not retried forever."""
    error = {
        "type": "unknown_error",
        "message": "The runtime failed to run this turn.",
        "retry_status": {"type": "exhausted"},
    }
    try:
        if Session.objects.filter(pk=session_id).exclude(status=Session.Status.TERMINATED).exists():
            services.event_emit(session_id=session_id, type="session.error", body={"error": error})
            services.session_transition(
                session_id=session_id, status=Session.Status.IDLE, stop_reason={"type": "error"}
            )
    except Exception:
        logger.exception("could not record the failure of session %s", session_id)
