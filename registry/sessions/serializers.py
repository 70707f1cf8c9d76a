"""Validation of session bodies, and the documented shapes of sessions and events."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from registry.core.fields import MetadataField, StrictCharField, StrictIntegerField, StrictSerializer, TaggedUnionField
from registry.sessions.events import INITIAL_EVENT_SERIALIZERS

AGENT_ID = r"^agent_[A-Za-z0-9_-]+$"


class AgentReferenceSerializer(StrictSerializer):
    type = serializers.ChoiceField(choices=["agent"])
    id = serializers.RegexField(AGENT_ID)
    version = StrictIntegerField(required=False, allow_null=True, min_value=1)


@extend_schema_field(
    {
        "oneOf": [
            {"type": "string", "pattern": AGENT_ID},
            {
                "type": "object",
                "properties": {
                    "type": {"type": "string", "enum": ["agent"]},
                    "id": {"type": "string", "pattern": AGENT_ID},
                    "version": {"type": "integer", "minimum": 1, "nullable": True},
                },
                "required": ["type", "id"],
                "additionalProperties": False,
            },
        ]
    }
)
class AgentReferenceField(serializers.Field):  # type: ignore[type-arg]
    """`agent`: an agent id (its latest version) or `{type: "agent", id, version}`."""

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if isinstance(data, str):
            data = {"type": "agent", "id": data}
        if not isinstance(data, dict):
            raise serializers.ValidationError("must be an agent id or {type: 'agent', id, version}.")
        reference = AgentReferenceSerializer(data=data)
        reference.is_valid(raise_exception=True)
        return dict(reference.validated_data)

    def to_representation(self, value: Any) -> Any:
        return value


RESERVED_MOUNT_ROOTS = ("/proc", "/dev", "/run", "/sys")


def validate_mount_path(value: str | None) -> None:
    """An absolute path in the sandbox, without `.` or `..` segments, outside the kernel's own trees."""
    if value is None:
        return
    segments = value.split("/")[1:]
    if not value.startswith("/") or not all(segments) or any(segment in (".", "..") for segment in segments):
        raise serializers.ValidationError("must be an absolute path without empty, '.' or '..' segments.")
    if any(value == root or value.startswith(root + "/") for root in RESERVED_MOUNT_ROOTS):
        raise serializers.ValidationError(f"must not be under {', '.join(RESERVED_MOUNT_ROOTS)}.")


class FileResourceSerializer(StrictSerializer):
    type = serializers.ChoiceField(choices=["file"])
    file_id = serializers.RegexField(r"^file_[A-Za-z0-9_-]+$")
    mount_path = StrictCharField(required=False, allow_null=True, max_length=1024, validators=[validate_mount_path])


class MemoryStoreResourceSerializer(StrictSerializer):
    type = serializers.ChoiceField(choices=["memory_store"])
    memory_store_id = serializers.RegexField(r"^mems_[A-Za-z0-9_-]+$")
    access = serializers.ChoiceField(choices=["read_write", "read_only"], required=False, allow_null=True)
    instructions = StrictCharField(required=False, allow_null=True, allow_blank=True, max_length=4096)


class CheckoutSerializer(StrictSerializer):
    type = serializers.ChoiceField(choices=["branch", "commit"])
    name = StrictCharField(required=False, max_length=256)
    sha = StrictCharField(required=False, max_length=64)


class GitHubRepositoryResourceSerializer(StrictSerializer):
    type = serializers.ChoiceField(choices=["github_repository"])
    url = serializers.RegexField(r"^https://[^\s/]+/[^\s]+$", max_length=2048)
    authorization_token = StrictCharField(required=False, max_length=4096, write_only=True)
    checkout = CheckoutSerializer(required=False, allow_null=True)
    mount_path = StrictCharField(required=False, allow_null=True, max_length=1024, validators=[validate_mount_path])


RESOURCE_KINDS = {
    "file": FileResourceSerializer,
    "memory_store": MemoryStoreResourceSerializer,
    "github_repository": GitHubRepositoryResourceSerializer,
}


class HarnessSerializer(StrictSerializer):
    """Which harness runs the session's turns (ours: not in the reference client)."""

    type = serializers.ChoiceField(choices=["default", "code_harness", "agent_sdk_harness"])
    mode = serializers.ChoiceField(choices=["separate", "integrated"], required=False)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if "mode" in attrs and attrs["type"] != "agent_sdk_harness":
            raise serializers.ValidationError({"mode": ["only the agent_sdk_harness has a mode."]})
        if attrs["type"] == "agent_sdk_harness":
            attrs.setdefault("mode", "integrated")
        return attrs


class MonetaryAmountSerializer(StrictSerializer):
    amount = serializers.RegexField(r"^(0|[1-9][0-9]{0,15})$")
    currency = serializers.ChoiceField(choices=["USD"])


class BudgetSerializer(StrictSerializer):
    """`BetaManagedAgentsBudgetLimitParam`: a hard list-cost ceiling in minor units of USD."""

    type = serializers.ChoiceField(choices=["limit"])
    max_list_cost = MonetaryAmountSerializer()


class SessionCreateSerializer(StrictSerializer):
    agent = AgentReferenceField()
    environment_id = serializers.RegexField(r"^env_[A-Za-z0-9_-]+$")
    title = StrictCharField(required=False, allow_null=True, allow_blank=True, max_length=512)
    metadata = MetadataField(required=False)
    vault_ids = serializers.ListField(
        child=serializers.RegexField(r"^vlt_[A-Za-z0-9_-]+$"), required=False, max_length=20
    )
    resources = serializers.ListField(
        child=TaggedUnionField(RESOURCE_KINDS, component_name="SessionResource"), required=False, max_length=100
    )
    initial_events = serializers.ListField(
        child=TaggedUnionField(INITIAL_EVENT_SERIALIZERS, component_name="InitialEvent"),
        required=False,
        max_length=100,
    )
    harness = HarnessSerializer(required=False)
    budget = BudgetSerializer(required=False)


class SessionResourceUpdateSerializer(StrictSerializer):
    """A live resource's only changeable field: a repository's token (rotation)."""

    authorization_token = StrictCharField(max_length=4096, write_only=True)


class SessionUpdateSerializer(StrictSerializer):
    title = StrictCharField(required=False, allow_null=True, allow_blank=True, max_length=512)
    metadata = MetadataField(required=False, allow_null_values=True)
    budget = BudgetSerializer(required=False, allow_null=True)


class SessionSerializer(serializers.Serializer):  # type: ignore[type-arg]
    """The session object (documentation of the response; rendering is `render_session`)."""

    id = serializers.CharField()
    type = serializers.ChoiceField(choices=["session"])
    agent = serializers.DictField()
    environment_id = serializers.CharField()
    harness = HarnessSerializer()
    title = serializers.CharField(allow_null=True)
    metadata = serializers.DictField(child=serializers.CharField())
    vault_ids = serializers.ListField(child=serializers.CharField())
    resources = serializers.ListField(child=serializers.DictField())
    status = serializers.ChoiceField(choices=["idle", "running", "rescheduling", "terminated"])
    stop_reason = serializers.DictField(allow_null=True)
    usage = serializers.DictField()
    stats = serializers.DictField()
    outcome_evaluations = serializers.ListField(child=serializers.DictField())
    budget = BudgetSerializer(allow_null=True)
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    archived_at = serializers.DateTimeField(allow_null=True)


class EventSerializer(serializers.Serializer):  # type: ignore[type-arg]
    """An event: `id`, `type`, the type's own fields, `processed_at` (documentation only)."""

    id = serializers.CharField()
    type = serializers.CharField()
    processed_at = serializers.DateTimeField(allow_null=True)


class AppendedEventSerializer(serializers.Serializer):  # type: ignore[type-arg]
    id = serializers.CharField()
    type = serializers.CharField()
    processed_at = serializers.DateTimeField(allow_null=True)
