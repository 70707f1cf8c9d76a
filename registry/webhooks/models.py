"""Webhook endpoints, the outbox of events, and each event's delivery to each endpoint with its attempts.

An event row is inserted in the transaction of the change that caused it (`outbox.emit`); the delivery
process fans it out into one `WebhookDelivery` per subscribed endpoint and sends those, recording a
`WebhookAttempt` per try.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone

from registry.core.ids import public_id_field
from registry.core.models import WorkspaceResource


class WebhookEndpoint(WorkspaceResource):
    """Where a workspace's events are delivered, signed with `signing_secret_sealed` (sealed like vault
    secrets, shown only at creation and regeneration)."""

    class State(models.TextChoices):
        ENABLED = "enabled"
        DISABLED = "disabled"

    id = public_id_field("whep")
    url = models.CharField(max_length=2048)
    name = models.CharField(max_length=256, blank=True, default="")
    description = models.TextField(blank=True, default="")
    enabled_events = models.JSONField(default=list)
    state = models.CharField(max_length=16, choices=State.choices, default=State.ENABLED)
    disabled_reason = models.CharField(
        max_length=512, blank=True, default="", help_text="Why delivery disabled it; empty when a user did."
    )
    signing_secret_sealed = models.TextField(help_text="The `whsec_` secret, sealed.")
    consecutive_failures = models.PositiveIntegerField(default=0)
    failing_since = models.DateTimeField(null=True, blank=True, help_text="The first failure of the current run.")
    retry_after = models.DateTimeField(
        null=True, blank=True, help_text="Nothing is sent before this (the endpoint's backoff after a failure)."
    )


class WebhookEvent(models.Model):
    """One event in the outbox: `seq` orders it, `id` is its `webhook-id` (stable across retries and
    endpoints), `data` its payload's `data`. `dispatched_at` is set once its deliveries exist."""

    seq = models.BigAutoField(primary_key=True)
    id = models.CharField(max_length=64, unique=True)
    workspace_id = models.CharField(max_length=64)
    type = models.CharField(max_length=64)
    data = models.JSONField()
    created_at = models.DateTimeField(default=timezone.now)
    dispatched_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["seq"], condition=Q(dispatched_at__isnull=True), name="webhook_event_undispatched"),
            models.Index(fields=["created_at"], name="webhook_event_created_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.type} {self.id}"


class WebhookDelivery(models.Model):
    """One event to one endpoint: `pending` until an attempt succeeds (`succeeded`) or the retries are
    spent (`failed`). A sender holds it while `lease_until` is in the future."""

    class Status(models.TextChoices):
        PENDING = "pending"
        SUCCEEDED = "succeeded"
        FAILED = "failed"

    id = public_id_field("whdl")
    # No index of its own: the unique (endpoint, event) pair leads with it.
    endpoint = models.ForeignKey(WebhookEndpoint, on_delete=models.CASCADE, related_name="deliveries", db_index=False)
    event = models.ForeignKey(WebhookEvent, on_delete=models.CASCADE, related_name="deliveries")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    attempt_count = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)
    leased_by = models.CharField(max_length=128, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)
    completed_at = models.DateTimeField(null=True, blank=True)
    redelivery_requested = models.BooleanField(
        default=False, help_text="A manual redelivery asked for the next attempt (which is then marked `manual`)."
    )

    class Meta:
        constraints = [models.UniqueConstraint(fields=["endpoint", "event"], name="webhook_delivery_unique")]
        indexes = [
            models.Index(fields=["endpoint", "created_at", "id"], name="webhook_delivery_list_idx"),
            # The sender claims each endpoint's oldest due deliveries first (in event order), looking for them
            # through this index only: each index more is written on every fan-out, claim and settle.
            models.Index(
                fields=["endpoint", "event"], condition=Q(status="pending"), name="webhook_delivery_pending_idx"
            ),
            # Retention prunes finished deliveries by age.
            models.Index(
                fields=["completed_at"], condition=~Q(status="pending"), name="webhook_delivery_completed_idx"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.event_id} → {self.endpoint_id}"


class WebhookAttempt(models.Model):
    """One try of a delivery: when, how long, the response's status and first bytes, or the error."""

    id = public_id_field("what")
    # No index of its own: (delivery, number) leads with it.
    delivery = models.ForeignKey(WebhookDelivery, on_delete=models.CASCADE, related_name="attempts", db_index=False)
    number = models.PositiveIntegerField()
    manual = models.BooleanField(default=False, help_text="Sent by a manual redelivery.")
    started_at = models.DateTimeField()
    latency_ms = models.PositiveIntegerField(null=True, blank=True)
    response_status = models.PositiveSmallIntegerField(null=True, blank=True)
    response_body = models.TextField(blank=True, default="", help_text="The first bytes of the response body.")
    error = models.CharField(max_length=512, blank=True, default="")
    succeeded = models.BooleanField(default=False)

    class Meta:
        indexes = [models.Index(fields=["delivery", "number"], name="webhook_attempt_idx")]

    def __str__(self) -> str:
        return f"{self.delivery_id} #{self.number}"
