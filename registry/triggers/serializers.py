"""Validation of trigger bodies, and the trigger object (described and rendered by `TriggerSerializer`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rest_framework import serializers

from registry.core.fields import MetadataField, StrictCharField, StrictIntegerField, StrictSerializer
from registry.core.schedule import check_schedule, check_timezone
from registry.core.serialization import ArchivableObjectSerializer, ConstantField, timestamp
from registry.sessions.serializers import AgentReferenceField
from registry.triggers.models import Trigger
from registry.triggers.titles import check_title_template

ENVIRONMENT_ID = r"^env_[A-Za-z0-9_-]+$"
VAULT_ID = r"^vlt_[A-Za-z0-9_-]+$"
PAYLOAD_MAX = 100_000
REPLICAS_MAX = 100
VAULTS_MAX = 20


class CronSourceSerializer(StrictSerializer):
    """`source`: a cron schedule read in `timezone` (IANA, default UTC) and the payload it delivers."""

    type = serializers.ChoiceField(choices=["cron"])
    schedule = StrictCharField(max_length=256)
    timezone = StrictCharField(max_length=64, required=False)
    payload = StrictCharField(max_length=PAYLOAD_MAX, trim_whitespace=False)

    def validate_schedule(self, value: str) -> str:
        return checked(check_schedule, value)

    def validate_timezone(self, value: str) -> str:
        return checked(check_timezone, value)


class SessionTemplateSerializer(StrictSerializer):
    """`session`: what every started session gets. With `partial`, a null metadata value deletes its key."""

    environment_id = serializers.RegexField(ENVIRONMENT_ID)
    title_template = StrictCharField(
        required=False, allow_null=True, allow_blank=True, max_length=512, trim_whitespace=False
    )
    metadata = MetadataField(required=False)
    vault_ids = serializers.ListField(child=serializers.RegexField(VAULT_ID), required=False, max_length=VAULTS_MAX)

    def validate_title_template(self, value: str | None) -> str | None:
        return value if value is None else checked(check_title_template, value)


class TriggerWriteSerializer(StrictSerializer):
    """The body of create (`partial=False`) and update (`partial=True`: every field optional, `source`
    and `session` merged field by field)."""

    name = StrictCharField(min_length=1, max_length=256)
    agent = AgentReferenceField()
    session_mode = serializers.ChoiceField(choices=Trigger.SessionMode.values, required=False)
    source = CronSourceSerializer()  # type: ignore[assignment]  # a declared field, not Field.source
    session = SessionTemplateSerializer()
    replicas = StrictIntegerField(min_value=1, max_value=REPLICAS_MAX, required=False)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.partial:
            self.fields["session"] = SessionTemplateSerializer(required=False, partial=True)


def checked(check: Callable[[str], object], value: str) -> str:
    """Run a check of `schedule`/`titles` on `value`, turning its ValueError into a field error."""
    try:
        check(value)
    except ValueError as error:
        raise serializers.ValidationError(str(error)) from error
    return value


class TriggerAgentSerializer(serializers.Serializer):  # type: ignore[type-arg]
    """`agent` of the trigger object: the pinned version, or the agent's latest when none is pinned."""

    type = serializers.ChoiceField(choices=["agent"])
    id = serializers.CharField()
    version = serializers.IntegerField()


class TriggerSerializer(ArchivableObjectSerializer):
    """The trigger object."""

    type = ConstantField("trigger")
    name = serializers.CharField()
    agent = TriggerAgentSerializer()
    session_mode = serializers.ChoiceField(choices=Trigger.SessionMode.values)
    source = CronSourceSerializer()  # type: ignore[assignment]  # a declared field, not Field.source
    session = SessionTemplateSerializer()
    replicas = serializers.IntegerField()
    status = serializers.ChoiceField(choices=Trigger.Status.values)
    next_fire_at = serializers.DateTimeField(allow_null=True)
    last_fired_at = serializers.DateTimeField(allow_null=True)
    error = serializers.CharField(allow_null=True)

    @classmethod
    def render(cls, trigger: Trigger) -> dict[str, Any]:
        return {
            "id": trigger.id,
            "type": "trigger",
            "name": trigger.name,
            "agent": {
                "type": "agent",
                "id": trigger.agent_id,
                "version": trigger.agent_version or trigger.agent.version,
            },
            "session_mode": trigger.session_mode,
            "source": {
                "type": "cron",
                "schedule": trigger.schedule,
                "timezone": trigger.timezone,
                "payload": trigger.payload,
            },
            "session": {
                "environment_id": trigger.environment_id,
                "title_template": trigger.title_template,
                "metadata": trigger.metadata,
                "vault_ids": trigger.vault_ids,
            },
            "replicas": trigger.replicas,
            "status": trigger.status,
            "next_fire_at": timestamp(trigger.next_fire_at),
            "last_fired_at": timestamp(trigger.last_fired_at),
            "error": trigger.error,
            "archived_at": timestamp(trigger.archived_at),
            "created_at": timestamp(trigger.created_at),
            "updated_at": timestamp(trigger.updated_at),
        }
