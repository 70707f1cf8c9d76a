"""The loop of `runtriggers`: fire every due trigger, wait, repeat; several schedulers may run at once.

The clock is a parameter (`run_once(now=...)`), so tests and `runtriggers --now` control time.
"""

from __future__ import annotations

import logging
import signal
import threading
from datetime import datetime
from types import FrameType

from django.db import DatabaseError, close_old_connections
from django.utils import timezone

from registry.triggers import selectors, services
from registry.triggers.models import TriggerFire

logger = logging.getLogger(__name__)

STOP_SIGNALS = ("SIGTERM", "SIGINT")


def run_once(*, now: datetime | None = None) -> list[TriggerFire]:
    """Fire every trigger due at `now` (default: the current time); the fires this scheduler made."""
    now = now or timezone.now()
    fires = []
    for trigger_id, fire_at in selectors.due_fires(now=now):
        try:
            fire = services.trigger_fire_due(trigger_id=trigger_id, fire_at=fire_at, now=now)
        except Exception:  # one trigger's failure must not stop the others; it is retried next pass
            logger.exception("firing trigger %s at %s failed", trigger_id, fire_at.isoformat())
            continue
        if fire is not None:
            logger.info("trigger %s fired for %s: session %s", trigger_id, fire_at.isoformat(), fire.session_id)
            fires.append(fire)
    return fires


class Scheduler:
    """Runs `run_once` every `poll_seconds` until SIGTERM or SIGINT (a second signal acts at once)."""

    def __init__(self, *, poll_seconds: float) -> None:
        self.poll_seconds = poll_seconds
        self.stopping = threading.Event()

    def stop(self, signum: int | None = None, frame: FrameType | None = None) -> None:
        self.stopping.set()
        for name in STOP_SIGNALS:
            signal.signal(getattr(signal, name), signal.SIG_DFL)

    def run(self) -> None:
        for name in STOP_SIGNALS:
            signal.signal(getattr(signal, name), self.stop)
        logger.info("trigger scheduler started")
        while not self.stopping.is_set():
            close_old_connections()
            try:
                run_once()
            except DatabaseError:  # the database is away: try again next pass
                logger.exception("scheduler pass failed")
            self.stopping.wait(self.poll_seconds)
        logger.info("trigger scheduler stopped")
