"""Guardrail (organization policy, optionally limited to some workspaces) and ModelPrice (dated prices)."""

from __future__ import annotations

from django.db import models


class Guardrail(models.Model):
    """A policy guardrail: a type from the catalog, its config, the phases it checks, where it applies."""

    name = models.CharField(max_length=255, unique=True)
    type = models.CharField(max_length=64)
    config = models.JSONField(default=dict)
    phases = models.JSONField(default=list)
    action = models.CharField(max_length=16, default="deny")
    workspace_ids = models.JSONField(default=list, help_text="Empty: every workspace.")
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.name} ({self.type})"


class ModelPrice(models.Model):
    """USD per million tokens for a model, in force from `effective_from` until a newer row."""

    provider = models.CharField(max_length=64)
    model = models.CharField(max_length=255)
    input_per_1m = models.DecimalField(max_digits=12, decimal_places=6)
    output_per_1m = models.DecimalField(max_digits=12, decimal_places=6)
    cache_read_per_1m = models.DecimalField(max_digits=12, decimal_places=6, null=True, blank=True)
    cache_write_per_1m = models.DecimalField(max_digits=12, decimal_places=6, null=True, blank=True)
    effective_from = models.DateTimeField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["provider", "model", "effective_from"], name="model_price_unique")
        ]
        indexes = [models.Index(fields=["provider", "model", "effective_from"], name="model_price_lookup_idx")]

    def __str__(self) -> str:
        return f"{self.provider}/{self.model} from {self.effective_from:%Y-%m-%d}"
