"""Validation of agent definitions (the fields of the reference client's agent type), and the agent object
(described and rendered by `AgentSerializer`)."""

from __future__ import annotations

import re
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from registry.agents.models import Agent, AgentVersion
from registry.agents.multiagent import parse as parse_multiagent
from registry.core.fields import (
    JsonSchemaObjectField,
    MetadataField,
    StrictBooleanField,
    StrictCharField,
    StrictIntegerField,
    StrictSerializer,
    TaggedUnionField,
    validate_http_url,
)
from registry.core.serialization import ArchivableObjectSerializer, ConstantField, MetadataMapField, timestamp

BUILT_IN_TOOLS = ("bash", "edit", "read", "write", "glob", "grep", "web_fetch", "web_search")
EFFORT_LEVELS = ("low", "medium", "high", "xhigh", "max")
PERMISSION_POLICIES = ("always_allow", "always_ask", "auto")
TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
MAX_TOOLS = 256
MAX_MCP_SERVERS = 20
DEFAULT_EFFORT = "high"


class PermissionPolicySerializer(StrictSerializer):
    type = serializers.ChoiceField(choices=PERMISSION_POLICIES)


class ToolsetDefaultConfigSerializer(StrictSerializer):
    enabled = StrictBooleanField(required=False, allow_null=True)
    permission_policy = PermissionPolicySerializer(required=False, allow_null=True)


class BuiltInToolConfigSerializer(StrictSerializer):
    """One built-in tool's configuration; web tools carry their extra settings through."""

    name = serializers.ChoiceField(choices=BUILT_IN_TOOLS)
    type = serializers.ChoiceField(choices=BUILT_IN_TOOLS, required=False)
    enabled = StrictBooleanField(required=False, allow_null=True)
    permission_policy = PermissionPolicySerializer(required=False, allow_null=True)
    allowed_domains = serializers.ListField(child=StrictCharField(), required=False, min_length=1, max_length=64)
    blocked_domains = serializers.ListField(child=StrictCharField(), required=False, min_length=1, max_length=64)
    max_content_tokens = StrictIntegerField(required=False, allow_null=True, min_value=1)
    max_uses = StrictIntegerField(required=False, allow_null=True, min_value=1)
    url_sources = serializers.JSONField(required=False, allow_null=True)
    user_location = serializers.JSONField(required=False, allow_null=True)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs.get("type", attrs["name"]) != attrs["name"]:
            raise serializers.ValidationError({"type": ["must equal name."]})
        return attrs


class McpToolConfigSerializer(StrictSerializer):
    name = StrictCharField(max_length=256)
    enabled = StrictBooleanField(required=False, allow_null=True)
    permission_policy = PermissionPolicySerializer(required=False, allow_null=True)


class AgentToolsetSerializer(StrictSerializer):
    type = serializers.ChoiceField(choices=["agent_toolset_20260401"])
    configs = BuiltInToolConfigSerializer(many=True, required=False)
    default_config = ToolsetDefaultConfigSerializer(required=False, allow_null=True)


class McpToolsetSerializer(StrictSerializer):
    type = serializers.ChoiceField(choices=["mcp_toolset"])
    mcp_server_name = StrictCharField(max_length=255)
    configs = McpToolConfigSerializer(many=True, required=False)
    default_config = ToolsetDefaultConfigSerializer(required=False, allow_null=True)


class CustomToolSerializer(StrictSerializer):
    type = serializers.ChoiceField(choices=["custom"])
    name = serializers.RegexField(TOOL_NAME, error_messages={"invalid": "1-128 letters, digits, '_' or '-'."})
    description = StrictCharField(max_length=4096)
    input_schema = JsonSchemaObjectField()


class McpServerSerializer(StrictSerializer):
    type = serializers.ChoiceField(choices=["url"])
    name = StrictCharField(min_length=1, max_length=255)
    url = StrictCharField(max_length=2048, validators=[validate_http_url])


class SkillReferenceSerializer(StrictSerializer):
    type = serializers.ChoiceField(choices=["anthropic", "custom"])
    skill_id = StrictCharField(max_length=255)
    version = StrictCharField(max_length=64, required=False, allow_null=True)


class ServiceAccountIdentitySerializer(StrictSerializer):
    type = serializers.ChoiceField(choices=["service_account"])


class AwsRoleIdentitySerializer(StrictSerializer):
    type = serializers.ChoiceField(choices=["aws_role"])
    role_arn = serializers.RegexField(r"^arn:aws[a-z-]*:iam::\d{12}:role/.+$", max_length=2048)


class ModelConfigSerializer(StrictSerializer):
    id = StrictCharField(min_length=1, max_length=256)
    effort = serializers.JSONField(required=False, allow_null=True)
    inference_geo = StrictCharField(max_length=64, required=False, allow_null=True)
    speed = serializers.ChoiceField(choices=["standard", "fast"], required=False, allow_null=True)

    def validate_effort(self, value: Any) -> Any:
        level = value.get("type") if isinstance(value, dict) else value
        if value is not None and (level not in EFFORT_LEVELS or (isinstance(value, dict) and len(value) != 1)):
            raise serializers.ValidationError(f"must be one of {list(EFFORT_LEVELS)} or {{'type': <level>}}.")
        return level


@extend_schema_field(
    {
        "oneOf": [
            {"type": "string", "minLength": 1, "maxLength": 256},
            {
                "type": "object",
                "properties": {
                    "id": {"type": "string", "minLength": 1, "maxLength": 256},
                    "effort": {
                        "oneOf": [
                            {"type": "string", "enum": list(EFFORT_LEVELS)},
                            {
                                "type": "object",
                                "properties": {"type": {"type": "string", "enum": list(EFFORT_LEVELS)}},
                                "required": ["type"],
                                "additionalProperties": False,
                            },
                        ],
                        "nullable": True,
                    },
                    "inference_geo": {"type": "string", "maxLength": 64, "nullable": True},
                    "speed": {"type": "string", "enum": ["standard", "fast"], "nullable": True},
                },
                "required": ["id"],
                "additionalProperties": False,
            },
        ]
    }
)
class ModelField(serializers.Field):  # type: ignore[type-arg]
    """`model`: a model id string, or `{id, effort, inference_geo, speed}`; stored as the object."""

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if isinstance(data, str):
            data = {"id": data}
        if not isinstance(data, dict):
            raise serializers.ValidationError("must be a model id string or a model config object.")
        config = ModelConfigSerializer(data=data)
        config.is_valid(raise_exception=True)
        values = config.validated_data
        return {
            "id": values["id"],
            "effort": {"type": values.get("effort") or DEFAULT_EFFORT},
            "inference_geo": values.get("inference_geo"),
            "speed": values.get("speed") or "standard",
        }

    def to_representation(self, value: Any) -> Any:
        return value


TOOL_KINDS = {
    "agent_toolset_20260401": AgentToolsetSerializer,
    "mcp_toolset": McpToolsetSerializer,
    "custom": CustomToolSerializer,
}
IDENTITY_KINDS = {"service_account": ServiceAccountIdentitySerializer, "aws_role": AwsRoleIdentitySerializer}


class AgentWriteSerializer(StrictSerializer):
    """The body of create (`partial=False`) and update (`partial=True`)."""

    name = StrictCharField(min_length=1, max_length=256)
    model = ModelField()
    description = StrictCharField(max_length=2048, required=False, allow_null=True, allow_blank=True)
    system = StrictCharField(
        max_length=100_000, required=False, allow_null=True, allow_blank=True, trim_whitespace=False
    )
    tools = serializers.ListField(
        child=TaggedUnionField(TOOL_KINDS, component_name="AgentTool"),
        required=False,
        allow_null=True,
        max_length=MAX_TOOLS,
    )
    # ListField, not `many=True`: DRF passes `allow_null` on to a many-serializer's items as well.
    mcp_servers = serializers.ListField(
        child=McpServerSerializer(), required=False, allow_null=True, max_length=MAX_MCP_SERVERS
    )
    skills = serializers.ListField(child=SkillReferenceSerializer(), required=False, allow_null=True)
    metadata = MetadataField(required=False)
    execution_identity = TaggedUnionField(
        IDENTITY_KINDS, component_name="ExecutionIdentity", required=False, allow_null=True
    )
    multiagent = serializers.JSONField(required=False, allow_null=True)
    version = StrictIntegerField(required=False, min_value=1)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not self.partial:
            self.fields.pop("version")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        # Checked here rather than per field: its errors name their own path (`multiagent.subagents...`).
        if "multiagent" in attrs:
            attrs["multiagent"] = parse_multiagent(attrs["multiagent"])
        return attrs


class AgentSerializer(ArchivableObjectSerializer):
    """The agent object of the reference client, at its current version or at `version`."""

    type = ConstantField("agent")
    version = serializers.IntegerField()
    name = serializers.CharField()
    description = serializers.CharField(allow_null=True)
    model = ModelConfigSerializer()
    system = serializers.CharField(allow_null=True)
    tools = serializers.ListField(child=TaggedUnionField(TOOL_KINDS, component_name="AgentTool"))
    mcp_servers = McpServerSerializer(many=True)
    skills = SkillReferenceSerializer(many=True)
    metadata = MetadataMapField()
    execution_identity = TaggedUnionField(IDENTITY_KINDS, component_name="ExecutionIdentity")
    multiagent = serializers.JSONField(allow_null=True)

    @classmethod
    def render(cls, agent: Agent, version: AgentVersion | None = None) -> dict[str, Any]:
        spec = version.spec if version is not None else agent.spec
        return {
            "id": agent.id,
            "type": "agent",
            "version": version.version if version is not None else agent.version,
            **spec,
            "created_at": timestamp(agent.created_at),
            "updated_at": timestamp(version.created_at if version is not None else agent.updated_at),
            "archived_at": timestamp(agent.archived_at),
        }
