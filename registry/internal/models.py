"""GuardrailState (per session, written back by gateways) and UsageRecord (deduplicated by request id)."""

from __future__ import annotations

from django.db import models


class GuardrailState(models.Model):
    session = models.OneToOneField("agent_sessions.Session", on_delete=models.CASCADE, related_name="guardrail_state")
    state = models.JSONField(default=dict)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"guardrail state of {self.session_id}"


class UsageRecord(models.Model):
    """One served model request as a gateway's `registry` usage sink reported it."""

    request_id = models.CharField(max_length=128, unique=True)
    workspace_id = models.CharField(max_length=64, null=True, blank=True, db_index=True)
    session_id = models.CharField(max_length=64, null=True, blank=True, db_index=True)
    model = models.CharField(max_length=255, blank=True, default="")
    input_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField(default=0)
    cost_usd = models.DecimalField(max_digits=18, decimal_places=9, default=0)
    ts = models.DateTimeField()
    record = models.JSONField()
    received_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.request_id
