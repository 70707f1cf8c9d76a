"""Session and SessionEvent: the event log is the one source of truth for what a session did.

A user event is stored on append with `seq` and `processed_at` null; the runtime's acknowledgment
gives it both. Every visible event has a `seq`, allocated under a lock on the session row, so the
visible log is gap-free in commit order.
"""

from __future__ import annotations

from django.db import models

from registry.core.ids import public_id_field
from registry.core.models import ArchivableResource


class Session(ArchivableResource):
    class Status(models.TextChoices):
        IDLE = "idle"
        RUNNING = "running"
        RESCHEDULING = "rescheduling"
        TERMINATED = "terminated"

    id = public_id_field("sesn")
    agent = models.ForeignKey("agents.Agent", on_delete=models.PROTECT, related_name="sessions")
    agent_version = models.PositiveIntegerField()
    agent_snapshot = models.JSONField(help_text="The agent definition at `agent_version`, as the session runs it.")
    environment = models.ForeignKey("environments.Environment", on_delete=models.PROTECT, related_name="sessions")
    harness = models.JSONField(default=dict)
    title = models.CharField(max_length=512, null=True, blank=True)
    metadata = models.JSONField(default=dict)
    vault_ids = models.JSONField(default=list)
    resources = models.JSONField(default=list)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.IDLE)
    stop_reason = models.JSONField(null=True, blank=True)
    usage = models.JSONField(default=dict)
    outcome_evaluations = models.JSONField(default=list)
    active_seconds = models.FloatField(default=0.0)
    last_seq = models.PositiveBigIntegerField(default=0)
    # Work for the runtime: user events not yet acknowledged, or a turn whose worker vanished.
    has_pending_events = models.BooleanField(default=False)
    lease_owner = models.CharField(max_length=128, null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    # The fencing token: raised on every claim, checked by every runtime write in its transaction.
    lease_token = models.PositiveBigIntegerField(default=0)
    # Claims of the turn in flight; a turn whose workers died this many times ends with an error.
    turn_attempts = models.PositiveSmallIntegerField(default=0)
    # `{"type": "limit", "max_list_cost": {"amount": "<minor units>", "currency": "USD"}}` or null.
    budget = models.JSONField(null=True, blank=True)
    list_cost_usd = models.DecimalField(max_digits=16, decimal_places=8, default=0)

    class Meta:
        indexes = [
            models.Index(fields=["workspace", "created_at", "id"], name="session_list_idx"),
            models.Index(fields=["has_pending_events", "lease_expires_at"], name="session_work_idx"),
        ]

    def __str__(self) -> str:
        return self.id


class SessionEvent(models.Model):
    """One event of a session's log; `body` holds the type-specific fields."""

    id = public_id_field("sevt")
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="events")
    seq = models.PositiveBigIntegerField(null=True, blank=True)
    type = models.CharField(max_length=64)
    body = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)
    processed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["session", "seq"], name="session_event_seq_unique")]
        indexes = [models.Index(fields=["session", "processed_at"], name="session_event_pending_idx")]

    def __str__(self) -> str:
        return f"{self.session_id}#{self.seq} {self.type}"


class WorkItem(models.Model):
    """A session's claim on a self-hosted sandbox: the unit an environment worker polls, acks and heartbeats.

    `queued` → (`ack`) `starting` → (first heartbeat) `active` → (`stop`) `stopping` → `stopped`. A polled item
    stays `queued` with `polled_at` set (pending) until acked; a lapsed lease puts it back in the queue.
    `session_ref` is the session's id, not a key: a deleted session's item outlives it as `stopped`.
    """

    class State(models.TextChoices):
        QUEUED = "queued"
        STARTING = "starting"
        ACTIVE = "active"
        STOPPING = "stopping"
        STOPPED = "stopped"

    id = public_id_field("work")
    workspace = models.ForeignKey("workspaces.Workspace", on_delete=models.CASCADE, related_name="+")
    environment = models.ForeignKey("environments.Environment", on_delete=models.CASCADE, related_name="+")
    session_ref = models.CharField(max_length=64)
    state = models.CharField(max_length=16, choices=State.choices, default=State.QUEUED)
    metadata = models.JSONField(default=dict)
    created_at = models.DateTimeField()
    # Handed to a poller and not acked yet: "pending"; another poll may reclaim it after `reclaim_older_than_ms`.
    polled_at = models.DateTimeField(null=True, blank=True)
    worker_id = models.CharField(max_length=256, null=True, blank=True)
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    latest_heartbeat_at = models.DateTimeField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    ttl_seconds = models.PositiveIntegerField(default=0)
    stop_requested_at = models.DateTimeField(null=True, blank=True)
    stopped_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["environment", "state", "created_at"], name="work_queue_idx"),
            models.Index(fields=["environment", "created_at", "id"], name="work_list_idx"),
            models.Index(fields=["session_ref", "created_at"], name="work_session_idx"),
        ]
        constraints = [
            # One live item per session: a second append racing to requeue it does nothing.
            models.UniqueConstraint(
                fields=["session_ref"],
                condition=models.Q(state__in=["queued", "starting", "active"]),
                name="work_one_live_per_session",
            )
        ]

    def __str__(self) -> str:
        return self.id


class WorkPoller(models.Model):
    """The last poll of one worker (`anthropic-worker-id`) on one environment: `workers_polling` of the stats."""

    environment = models.ForeignKey("environments.Environment", on_delete=models.CASCADE, related_name="+")
    worker_id = models.CharField(max_length=256)
    polled_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["environment", "worker_id"], name="work_poller_unique")]

    def __str__(self) -> str:
        return f"{self.worker_id}@{self.environment_id}"


class SessionThread(models.Model):
    """A child thread of a session: another agent run by the session's runtime in the same sandbox.

    The primary thread has no row: it is the session itself, under the id `primary_thread_id(session)`.
    A child thread's events are `ThreadEvent` rows with their own gap-free `seq`, allocated under this
    row's lock (taken after the session row's, which fences every runtime write of the session).
    """

    class Status(models.TextChoices):
        RUNNING = "running"
        IDLE = "idle"
        RESCHEDULING = "rescheduling"
        TERMINATED = "terminated"

    id = public_id_field("sthr")
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="threads")
    parent_thread_id = models.CharField(max_length=64)
    depth = models.PositiveSmallIntegerField(default=1)
    agent_name = models.CharField(max_length=256)
    agent = models.JSONField(help_text="The agent the thread runs, as snapshotted when it was created.")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.IDLE)
    stop_reason = models.JSONField(null=True, blank=True)
    usage = models.JSONField(null=True, blank=True)
    active_seconds = models.FloatField(default=0.0)
    list_cost_usd = models.DecimalField(max_digits=16, decimal_places=8, default=0)
    last_seq = models.PositiveBigIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    started_at = models.DateTimeField(null=True, blank=True)
    archived_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["session", "created_at", "id"], name="session_thread_list_idx")]

    def __str__(self) -> str:
        return self.id


class ThreadEvent(models.Model):
    """One event of a child thread's log (the primary thread's are the session's `SessionEvent` rows)."""

    id = public_id_field("sevt")
    thread = models.ForeignKey(SessionThread, on_delete=models.CASCADE, related_name="events")
    seq = models.PositiveBigIntegerField()
    type = models.CharField(max_length=64)
    body = models.JSONField(default=dict)
    created_at = models.DateTimeField()
    processed_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["thread", "seq"], name="thread_event_seq_unique")]

    def __str__(self) -> str:
        return f"{self.thread_id}#{self.seq} {self.type}"


def primary_thread_id(session_id: str) -> str:
    """The primary thread's id: the session's random part under the thread prefix."""
    return "sthr_" + session_id.split("_", 1)[1]
