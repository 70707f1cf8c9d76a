"""The loop of `runtriggers`: fire every due trigger and every due deployment, wait, repeat; several
schedulers may run at once.

The clock is a parameter (`run_once(now=...)`), so tests and `runtriggers --now` control time.
SIGTERM lets the fire in progress finish, then the scheduler exits (`/readyz` answers 503 meanwhile).
Fires (of triggers and of deployments), their lag behind the schedule and the triggers with a schedule are
counted for Prometheus.
"""

from __future__ import annotations

import logging
import signal
import threading
from datetime import datetime
from types import FrameType

from django.db import DatabaseError, close_old_connections
from django.utils import timezone
from prometheus_client import Counter, Histogram

from registry.core.observability import DatabaseGauge, HealthServer, database_reachable
from registry.deployments import selectors as deployment_selectors
from registry.deployments import services as deployment_services
from registry.deployments.models import DeploymentRun
from registry.triggers import selectors, services
from registry.triggers.models import SCHEDULED_STATUSES, Trigger, TriggerFire

logger = logging.getLogger(__name__)

STOP_SIGNALS = ("SIGTERM", "SIGINT")
HEALTH_PORT = 9101

LAG_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 3600)
FIRES = Counter(
    "registry_trigger_fires_total", "Fires this scheduler made, by outcome (session started, or error).", ["outcome"]
)
FIRE_LAG = Histogram(
    "registry_trigger_fire_lag_seconds",
    "How late a fire was: when it was made (the real clock) minus its scheduled time.",
    buckets=LAG_BUCKETS,
)
DEPLOYMENT_FIRES = Counter(
    "registry_deployment_fires_total",
    "Scheduled deployment fires this scheduler made, by outcome (session created, or error).",
    ["outcome"],
)
DEPLOYMENT_FIRE_LAG = Histogram(
    "registry_deployment_fire_lag_seconds",
    "How late a deployment fire was: when it was made (the real clock) minus its scheduled time.",
    buckets=LAG_BUCKETS,
)
ACTIVE_TRIGGERS = DatabaseGauge(
    "registry_triggers_active",
    "Triggers with a running schedule (active or failing), counted when scraped.",
    lambda: Trigger.objects.filter(status__in=SCHEDULED_STATUSES).count(),
)


def run_once(*, now: datetime | None = None, stop: threading.Event | None = None) -> list[TriggerFire]:
    """Fire every trigger and every deployment due at `now` (default: the current time); the trigger fires
    this scheduler made (its deployment runs are in the database, and counted). Once `stop` is set no
    further fire starts."""
    now = now or timezone.now()
    fires = fire_due_triggers(now=now, stop=stop)
    fire_due_deployments(now=now, stop=stop)
    return fires


def fire_due_triggers(*, now: datetime, stop: threading.Event | None = None) -> list[TriggerFire]:
    fires = []
    for trigger_id, fire_at in selectors.due_fires(now=now):
        if stop is not None and stop.is_set():
            break
        try:
            fire = services.trigger_fire_due(trigger_id=trigger_id, fire_at=fire_at, now=now)
        except Exception:  # one trigger's failure must not stop the others; it is retried next pass
            logger.exception("firing trigger %s at %s failed", trigger_id, fire_at.isoformat())
            continue
        if fire is not None:
            FIRES.labels("session" if fire.session_id else "error").inc()
            FIRE_LAG.observe(max((timezone.now() - fire_at).total_seconds(), 0.0))
            logger.info("trigger %s fired for %s: session %s", trigger_id, fire_at.isoformat(), fire.session_id)
            fires.append(fire)
    return fires


def fire_due_deployments(*, now: datetime, stop: threading.Event | None = None) -> list[DeploymentRun]:
    """The scheduled runs of the deployments due at `now` this scheduler made."""
    runs = []
    for deployment_id, scheduled_at in deployment_selectors.due_fires(now=now):
        if stop is not None and stop.is_set():
            break
        try:
            run = deployment_services.deployment_fire_due(
                deployment_id=deployment_id, scheduled_at=scheduled_at, now=now
            )
        except Exception:  # one deployment's failure must not stop the others; it is retried next pass
            logger.exception("firing deployment %s at %s failed", deployment_id, scheduled_at.isoformat())
            continue
        if run is not None:
            DEPLOYMENT_FIRES.labels("session" if run.session_id else "error").inc()
            DEPLOYMENT_FIRE_LAG.observe(max((timezone.now() - scheduled_at).total_seconds(), 0.0))
            outcome = f"session {run.session_id}" if run.session_id else f"error {run.error}"
            logger.info("deployment %s fired for %s: %s", deployment_id, scheduled_at.isoformat(), outcome)
            runs.append(run)
    return runs


class Scheduler:
    """Runs `run_once` every `poll_seconds` until SIGTERM or SIGINT (a second signal acts at once)."""

    def __init__(self, *, poll_seconds: float) -> None:
        self.poll_seconds = poll_seconds
        self.stopping = threading.Event()

    def stop(self, signum: int | None = None, frame: FrameType | None = None) -> None:
        self.stopping.set()
        for name in STOP_SIGNALS:
            signal.signal(getattr(signal, name), signal.SIG_DFL)

    def readiness(self) -> str | None:
        """Why this scheduler cannot fire now (stopping, no database), or None."""
        if self.stopping.is_set():
            return "draining"
        return None if database_reachable() else "the database is unreachable"

    def run(self, *, health: HealthServer | None = None) -> None:
        """Pass after pass until stopped; `health` is served meanwhile."""
        for name in STOP_SIGNALS:
            signal.signal(getattr(signal, name), self.stop)
        if health:
            health.start()
        logger.info("trigger scheduler started (health port %s)", health.port if health else "off")
        try:
            while not self.stopping.is_set():
                close_old_connections()
                try:
                    run_once(stop=self.stopping)
                except DatabaseError:  # the database is away: try again next pass
                    logger.exception("scheduler pass failed")
                self.stopping.wait(self.poll_seconds)
        finally:
            if health:
                health.stop()
        logger.info("trigger scheduler stopped")
