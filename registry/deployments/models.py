"""Deployment (an agent, its environment and initial events, fired on a schedule or by `run`) and
DeploymentRun (one fire: the session it created, or the typed error that prevented it)."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from registry.core.ids import public_id_field
from registry.core.models import ArchivableResource


class Deployment(ArchivableResource):
    """The template of the sessions each fire creates, and its schedule.

    The agent is pinned to one version. `environment_id`, `vault_ids` and the resources are plain
    references, not foreign keys: a deleted environment, vault or file must not delete the deployment,
    it makes the next fire fail with a typed error (and pause it). `next_fire_at` is the next tick the
    scheduler fires while the deployment is active and scheduled; null otherwise.
    """

    class Status(models.TextChoices):
        ACTIVE = "active"
        PAUSED = "paused"

    id = public_id_field("depl")
    name = models.CharField(max_length=256)
    description = models.TextField(null=True, blank=True)
    agent = models.ForeignKey("agents.Agent", on_delete=models.CASCADE, related_name="deployments")
    agent_version = models.PositiveIntegerField()
    environment_id = models.CharField(max_length=64)
    initial_events = models.JSONField(default=list)
    resources = models.JSONField(
        default=list, help_text="As given, a repository's authorization token sealed (never shown)."
    )
    vault_ids = models.JSONField(default=list)
    budget = models.JSONField(null=True, blank=True)
    metadata = models.JSONField(default=dict)
    schedule_expression = models.CharField(max_length=256, null=True, blank=True)
    schedule_timezone = models.CharField(max_length=64, null=True, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.ACTIVE)
    paused_reason = models.JSONField(null=True, blank=True, help_text="Set exactly when the status is paused.")
    next_fire_at = models.DateTimeField(null=True, blank=True)
    last_run_at = models.DateTimeField(null=True, blank=True, help_text="When the last scheduled run started.")

    class Meta:
        indexes = [
            models.Index(fields=["workspace", "created_at", "id"], name="deployment_list_idx"),
            models.Index(
                fields=["next_fire_at"],
                condition=Q(status="active", archived_at__isnull=True, next_fire_at__isnull=False),
                name="deployment_due_idx",
            ),
        ]

    @property
    def scheduled(self) -> bool:
        return self.schedule_expression is not None


class DeploymentRun(models.Model):
    """One fire of a deployment, append-only. A scheduled run's row is its claim: the unique
    (deployment, scheduled_at) pair lets several schedulers run without ever firing a tick twice.
    Exactly one of `session_id` and `error` is set once the fire's transaction commits."""

    class TriggerType(models.TextChoices):
        SCHEDULE = "schedule"
        MANUAL = "manual"

    id = public_id_field("drun")
    workspace = models.ForeignKey("workspaces.Workspace", on_delete=models.CASCADE, related_name="+")
    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="runs")
    agent_id = models.CharField(max_length=64)
    agent_version = models.PositiveIntegerField()
    trigger_type = models.CharField(max_length=16, choices=TriggerType.choices)
    scheduled_at = models.DateTimeField(null=True, blank=True, help_text="The tick a scheduled run fired for.")
    # A plain id: the run records the session's creation and does not follow the session afterwards.
    session_id = models.CharField(max_length=64, null=True, blank=True)
    error = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["deployment", "scheduled_at"], name="deployment_run_tick_unique")
        ]
        indexes = [
            models.Index(fields=["workspace", "created_at", "id"], name="deployment_run_list_idx"),
            models.Index(fields=["deployment", "created_at", "id"], name="deployment_run_deployment_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.id} ({self.deployment_id})"
