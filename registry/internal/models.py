"""GuardrailState (per session, written back by gateways), UsageRecord (deduplicated by request id), and
SigningKey (the keys that sign the runtime's model-call tokens, published as a JWKS for gateways)."""

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


class SigningKey(models.Model):
    """An ES256 key of the registry; the private half is sealed at rest, the public half is published."""

    kid = models.CharField(max_length=64, primary_key=True)
    sealed_private_key = models.TextField()
    public_jwk = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)
    retired_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return self.kid
