"""Validation of guardrail and model-price writes, and the guardrail and model price objects (described and
rendered by `GuardrailSerializer`, `ModelPriceSerializer`)."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

from rest_framework import serializers

from registry.core.fields import StrictBooleanField, StrictCharField, StrictSerializer
from registry.core.serialization import ConstantField, CreatedObjectSerializer, TimestampedObjectSerializer
from registry.extensions.catalog import GUARDRAIL_TYPES, PHASES

ACTIONS = ("deny", "alert")


def _strings(value: Any, name: str) -> list[str]:
    if not isinstance(value, list) or not value or not all(isinstance(item, str) and item for item in value):
        raise serializers.ValidationError({"config": [f"{name} must be a non-empty list of strings."]})
    return value


def validate_guardrail_config(kind: str, config: dict[str, Any]) -> None:
    """Each type's own config rules (the catalog documents them)."""
    if kind == "pii_regex":
        for pattern in _strings(config.get("patterns"), "patterns"):
            try:
                re.compile(pattern)
            except re.error as error:
                raise serializers.ValidationError(
                    {"config": [f"patterns: {pattern!r} is not a regex: {error}"]}
                ) from None
    elif kind in ("blocked_terms", "model_allowlist", "tool_denylist"):
        _strings(
            config.get({"blocked_terms": "terms", "model_allowlist": "models", "tool_denylist": "tools"}[kind]), kind
        )
    elif kind == "user_daily_cost_budget":
        usd = config.get("usd")
        if isinstance(usd, bool) or not isinstance(usd, int | float) or usd <= 0:
            raise serializers.ValidationError({"config": ["usd must be a number greater than zero."]})


class GuardrailWriteSerializer(StrictSerializer):
    name = StrictCharField(min_length=1, max_length=255)
    type = serializers.ChoiceField(choices=sorted(GUARDRAIL_TYPES))
    config = serializers.DictField()
    phases = serializers.ListField(child=serializers.ChoiceField(choices=PHASES), required=False, min_length=1)
    action = serializers.ChoiceField(choices=ACTIONS, required=False)
    workspace_ids = serializers.ListField(child=serializers.RegexField(r"^wsp_[A-Za-z0-9_-]+$"), required=False)
    enabled = StrictBooleanField(required=False)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        kind = attrs.get("type") or getattr(self.instance, "type", None)
        if kind and "config" in attrs:
            validate_guardrail_config(kind, attrs["config"])
        allowed = GUARDRAIL_TYPES[kind]["phases"] if kind else PHASES
        wrong = [phase for phase in attrs.get("phases", []) if phase not in allowed]
        if wrong:
            raise serializers.ValidationError({"phases": [f"{kind} does not check {wrong}."]})
        return attrs


class ModelPriceWriteSerializer(StrictSerializer):
    provider = StrictCharField(min_length=1, max_length=64)
    model = StrictCharField(min_length=1, max_length=255)
    input_per_1m = serializers.DecimalField(max_digits=12, decimal_places=6, min_value=Decimal(0))
    output_per_1m = serializers.DecimalField(max_digits=12, decimal_places=6, min_value=Decimal(0))
    cache_read_per_1m = serializers.DecimalField(
        max_digits=12, decimal_places=6, min_value=Decimal(0), required=False, allow_null=True
    )
    cache_write_per_1m = serializers.DecimalField(
        max_digits=12, decimal_places=6, min_value=Decimal(0), required=False, allow_null=True
    )
    effective_from = serializers.DateTimeField(required=False)


class GuardrailSerializer(TimestampedObjectSerializer):
    """The guardrail object, as the API answers it and as a session's guardrail bundle carries it."""

    type = ConstantField("guardrail")
    name = serializers.CharField()
    guardrail_type = serializers.ChoiceField(choices=sorted(GUARDRAIL_TYPES), source="type")
    config = serializers.DictField()
    phases = serializers.ListField(child=serializers.ChoiceField(choices=PHASES))
    action = serializers.ChoiceField(choices=ACTIONS)
    workspace_ids = serializers.ListField(child=serializers.CharField())
    enabled = serializers.BooleanField()


class ModelPriceSerializer(CreatedObjectSerializer):
    """A dated model price (US dollars per million tokens)."""

    type = ConstantField("model_price")
    provider = serializers.CharField()
    model = serializers.CharField()
    input_per_1m = serializers.FloatField()
    output_per_1m = serializers.FloatField()
    cache_read_per_1m = serializers.FloatField(allow_null=True)
    cache_write_per_1m = serializers.FloatField(allow_null=True)
    effective_from = serializers.DateTimeField()
