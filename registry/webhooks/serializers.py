"""Webhook bodies (the reference client's `WebhookCreateParams` / `WebhookUpdateParams`, whose rules the services
check) and objects: the endpoint (`BetaOrganizationWebhookEndpoint`, no `type` and never the secret), the new
endpoint (`BetaNewOrganizationWebhookEndpoint`, with it), deliveries and their attempts (our addition)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from registry.core.fields import StrictCharField, StrictSerializer
from registry.core.serialization import ConstantField, ObjectSerializer, ResponseSerializer, TimestampedObjectSerializer
from registry.webhooks.models import WebhookDelivery, WebhookEndpoint

MAX_NAME_LENGTH = 256
MAX_DESCRIPTION_LENGTH = 4096
MAX_EVENT_ENTRIES = 128  # duplicates collapse; more entries than this is not a subscription list


def event_types_field(*, required: bool) -> serializers.ListField:
    return serializers.ListField(
        child=StrictCharField(max_length=64), required=required, allow_empty=not required, max_length=MAX_EVENT_ENTRIES
    )


class WebhookEndpointCreateSerializer(StrictSerializer):
    """`url` and at least one of `enabled_events`; `name` and `description` optional."""

    url = StrictCharField(trim_whitespace=False)
    enabled_events = event_types_field(required=True)
    name = StrictCharField(required=False, allow_blank=True, max_length=MAX_NAME_LENGTH)
    description = StrictCharField(required=False, allow_blank=True, max_length=MAX_DESCRIPTION_LENGTH)


class WebhookEndpointUpdateSerializer(StrictSerializer):
    """Every field optional; `enabled_events` replaces the set (an empty list leaves it unchanged)."""

    url = StrictCharField(required=False, trim_whitespace=False)
    enabled_events = event_types_field(required=False)
    name = StrictCharField(required=False, allow_blank=True, max_length=MAX_NAME_LENGTH)
    description = StrictCharField(required=False, allow_blank=True, max_length=MAX_DESCRIPTION_LENGTH)
    state = serializers.ChoiceField(choices=WebhookEndpoint.State.choices, required=False)


class WebhookEndpointSerializer(TimestampedObjectSerializer):
    """The endpoint object; `disabled_reason` is empty unless delivery disabled it."""

    description = serializers.CharField()
    disabled_reason = serializers.CharField()
    enabled_events = serializers.ListField(child=serializers.CharField())
    name = serializers.CharField()
    state = serializers.ChoiceField(choices=WebhookEndpoint.State.choices)
    url = serializers.CharField()


class NewWebhookEndpointSerializer(WebhookEndpointSerializer):
    """The create response: the endpoint and its signing secret, which no other response carries."""

    signing_secret = serializers.CharField()

    @classmethod
    def render(cls, *args: Any, **options: Any) -> dict[str, Any]:
        endpoint = args[0]
        rendered = WebhookEndpointSerializer.render(endpoint)
        return {**rendered, "signing_secret": options["signing_secret"]}


class SigningSecretSerializer(ResponseSerializer):
    """The regeneration response (`BetaOrganizationWebhookEndpointSigningSecret`)."""

    signing_secret = serializers.CharField()

    @classmethod
    def render(cls, *args: Any, **options: Any) -> dict[str, Any]:
        return {"signing_secret": args[0]}


class LastAttemptSerializer(ResponseSerializer):
    """What the last attempt of a delivery got: a response status and latency, or an error."""

    response_status = serializers.IntegerField(allow_null=True)
    latency_ms = serializers.IntegerField(allow_null=True)
    error = serializers.CharField()


class WebhookAttemptSerializer(ObjectSerializer):
    """One try of a delivery (`manual`: sent after a redelivery); `response_body` is the response's first bytes."""

    number = serializers.IntegerField()
    manual = serializers.BooleanField()
    started_at = serializers.DateTimeField()
    latency_ms = serializers.IntegerField(allow_null=True)
    response_status = serializers.IntegerField(allow_null=True)
    response_body = serializers.CharField()
    error = serializers.CharField()
    succeeded = serializers.BooleanField()


class WebhookDeliverySerializer(ObjectSerializer):
    """One event's delivery to one endpoint, as the selectors read it (`last_attempt_*` annotations)."""

    type = ConstantField("webhook_delivery")
    event_id = serializers.CharField()
    event_type = serializers.CharField()
    status = serializers.ChoiceField(choices=WebhookDelivery.Status.choices)
    attempt_count = serializers.IntegerField()
    next_attempt_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()
    completed_at = serializers.DateTimeField(allow_null=True)
    last_attempt = LastAttemptSerializer(allow_null=True)

    @staticmethod
    def get_event_id(delivery: WebhookDelivery) -> str:
        return delivery.event.id

    @staticmethod
    def get_event_type(delivery: WebhookDelivery) -> str:
        return delivery.event.type

    @staticmethod
    def get_last_attempt(delivery: Any) -> dict[str, Any] | None:
        if delivery.last_attempt_number is None:
            return None
        return {
            "response_status": delivery.last_attempt_response_status,
            "latency_ms": delivery.last_attempt_latency_ms,
            "error": delivery.last_attempt_error,
        }


class WebhookDeliveryDetailSerializer(WebhookDeliverySerializer):
    """A delivery with every attempt, in order."""

    attempts = WebhookAttemptSerializer(many=True)

    @staticmethod
    def get_attempts(delivery: Any) -> list[dict[str, Any]]:
        return [WebhookAttemptSerializer.render(attempt) for attempt in delivery.attempts_in_order]
