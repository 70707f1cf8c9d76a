"""Validation of session bodies, and the session and event objects (described and rendered by
`SessionSerializer`, `EventSerializer`, `AppendedEventSerializer`)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from registry.agents.services import SPEC_FIELDS
from registry.core.fields import MetadataField, StrictCharField, StrictIntegerField, StrictSerializer, TaggedUnionField
from registry.core.serialization import (
    ArchivableObjectSerializer,
    ConstantField,
    MetadataMapField,
    ResponseSerializer,
    timestamp,
)
from registry.core.tracing import TRACEPARENT_FIELD
from registry.sessions.events import ENVELOPE_FIELDS, INITIAL_EVENT_SERIALIZERS, NATIVE_BETA_FIELD
from registry.sessions.log import THINKING_FIELD
from registry.sessions.models import Session, SessionEvent
from registry.sessions.selectors import duration_seconds, public_resource
from registry.sessions.thread_log import DELIVERED_FIELD

AGENT_ID = r"^agent_[A-Za-z0-9_-]+$"
# What the registry keeps on an event for itself, never rendered.
INTERNAL_FIELDS = (NATIVE_BETA_FIELD, TRACEPARENT_FIELD, THINKING_FIELD, DELIVERED_FIELD)


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
    url = serializers.RegexField(
        r"^https://[^\s/]+/[^\s]+$",
        max_length=2048,
        error_messages={
            "invalid": "must be an https:// URL of a repository (https is required), like https://github.com/owner/name"
        },
    )
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


# The agent as a session shows it: its spec at the pinned version, without the agent's metadata.
AGENT_SNAPSHOT_FIELDS = tuple(field for field in SPEC_FIELDS if field != "metadata")


def session_agent(session: Session) -> dict[str, Any]:
    """The agent a session runs: its pinned version's spec as snapshotted when the session was created."""
    snapshot = session.agent_snapshot
    return {
        "type": "agent",
        "id": session.agent_id,
        "version": session.agent_version,
        **{key: snapshot.get(key) for key in AGENT_SNAPSHOT_FIELDS},
    }


def session_stats(session: Session) -> dict[str, Any]:
    return {"active_seconds": session.active_seconds, "duration_seconds": duration_seconds(session)}


class SessionSerializer(ArchivableObjectSerializer):
    """The session object: `agent` is the definition the session runs (its snapshot at creation)."""

    type = ConstantField("session")
    agent = serializers.DictField()
    environment_id = serializers.CharField()
    harness = HarnessSerializer()
    title = serializers.CharField(allow_null=True)
    metadata = MetadataMapField()
    vault_ids = serializers.ListField(child=serializers.CharField())
    resources = serializers.ListField(child=serializers.DictField())
    status = serializers.ChoiceField(choices=["idle", "running", "rescheduling", "terminated"])
    stop_reason = serializers.DictField(allow_null=True)
    usage = serializers.DictField()
    stats = serializers.DictField()
    outcome_evaluations = serializers.ListField(child=serializers.DictField())
    budget = BudgetSerializer(allow_null=True)

    @classmethod
    def render(cls, session: Session) -> dict[str, Any]:
        return {
            "id": session.id,
            "type": "session",
            "agent": session_agent(session),
            "environment_id": session.environment_id,
            "harness": session.harness,
            "title": session.title,
            "metadata": session.metadata,
            "vault_ids": session.vault_ids,
            "resources": [public_resource(resource) for resource in session.resources],
            "status": session.status,
            "stop_reason": session.stop_reason,
            "usage": {**session.usage, "active_seconds": session.active_seconds},
            "stats": session_stats(session),
            "outcome_evaluations": session.outcome_evaluations,
            "budget": session.budget,
            "created_at": timestamp(session.created_at),
            "updated_at": timestamp(session.updated_at),
            "archived_at": timestamp(session.archived_at),
        }


class EventSerializer(ResponseSerializer):
    """An event: `id`, `type`, the type's own fields, `processed_at`; in the `native-beta` dialect also
    the transcript envelope (`seq`, `subpath`), which the default dialect drops."""

    id = serializers.CharField()
    type = serializers.CharField()
    processed_at = serializers.DateTimeField(allow_null=True)

    @classmethod
    def render(cls, event: SessionEvent, *, native: bool) -> dict[str, Any]:
        body = {"id": event.id, "type": event.type, **event.body, "processed_at": timestamp(event.processed_at)}
        for field in INTERNAL_FIELDS:
            body.pop(field, None)
        if native:
            body["seq"] = event.seq
            body.setdefault("subpath", None)
        else:
            for field in ENVELOPE_FIELDS:
                body.pop(field, None)
        return body


class AppendedEventSerializer(ResponseSerializer):
    """An event as the append answers it: stored, not yet processed."""

    id = serializers.CharField()
    type = serializers.CharField()
    processed_at = serializers.DateTimeField(allow_null=True)

    @classmethod
    def render(cls, event: SessionEvent) -> dict[str, Any]:
        return {"id": event.id, "type": event.type, "processed_at": timestamp(event.processed_at)}
