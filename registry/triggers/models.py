"""Trigger (a cron schedule that starts sessions) and TriggerFire (one row per fire, its claim)."""

from __future__ import annotations

from django.db import models

from registry.core.ids import public_id_field
from registry.core.models import ArchivableResource


class Trigger(ArchivableResource):
    """A cron source and the template of the sessions each fire starts.

    `environment_id` is a plain reference, not a foreign key: deleting the environment must not
    delete the trigger, it makes the next fire fail with a reason in `error`.
    """

    class Status(models.TextChoices):
        ACTIVE = "active"
        PAUSED = "paused"
        ERROR = "error"
        ARCHIVED = "archived"

    class SessionMode(models.TextChoices):
        SESSION_PER_EVENT = "SESSION_PER_EVENT"

    id = public_id_field("trg")
    name = models.CharField(max_length=256)
    agent = models.ForeignKey("agents.Agent", on_delete=models.CASCADE, related_name="triggers")
    agent_version = models.PositiveIntegerField(null=True, blank=True, help_text="Empty: the agent's latest version.")
    session_mode = models.CharField(max_length=32, choices=SessionMode.choices, default=SessionMode.SESSION_PER_EVENT)
    schedule = models.CharField(max_length=256)
    timezone = models.CharField(max_length=64, default="UTC")
    payload = models.TextField()
    environment_id = models.CharField(max_length=64)
    title_template = models.CharField(max_length=512, null=True, blank=True)
    metadata = models.JSONField(default=dict, help_text="Metadata of the started sessions.")
    vault_ids = models.JSONField(default=list)
    replicas = models.PositiveIntegerField(default=1)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.ACTIVE)
    next_fire_at = models.DateTimeField(null=True, blank=True)
    last_fired_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["workspace", "created_at", "id"], name="trigger_list_idx"),
            models.Index(fields=["status", "next_fire_at"], name="trigger_due_idx"),
        ]


# The statuses the scheduler fires: `error` only says the last fire failed, the schedule goes on.
SCHEDULED_STATUSES = (Trigger.Status.ACTIVE, Trigger.Status.ERROR)


class TriggerFire(models.Model):
    """One fire of a trigger. Inserting the row claims the fire: the unique (trigger, fire_at) pair
    is what lets several schedulers run without ever starting a fire twice."""

    trigger = models.ForeignKey(Trigger, on_delete=models.CASCADE, related_name="fires")
    fire_at = models.DateTimeField()
    session = models.ForeignKey(
        "agent_sessions.Session", on_delete=models.SET_NULL, null=True, blank=True, related_name="trigger_fires"
    )
    error = models.TextField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["trigger", "fire_at"], name="trigger_fire_unique")]

    def __str__(self) -> str:
        return f"{self.trigger_id} @ {self.fire_at.isoformat()}"
