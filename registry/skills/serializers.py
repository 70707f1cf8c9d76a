"""Validation of the skill upload forms, the skill and version objects (described and rendered by
`SkillSerializer`, `SkillVersionSerializer`) and the documented upload and delete shapes."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from registry.core.fields import StrictSerializer
from registry.core.serialization import ResponseSerializer, timestamp
from registry.skills.models import Skill, SkillVersion

SOURCES = ("custom", "anthropic", "anthropic_example", "plugin")


def single_line(value: str) -> None:
    if "\n" in value or "\r" in value:
        raise serializers.ValidationError("must be a single line.")


class SkillCreateFieldsSerializer(StrictSerializer):
    """The non-file fields of `POST /v1/skills`."""

    display_name = serializers.CharField(max_length=255, required=False, validators=[single_line])


class SkillVersionFieldsSerializer(StrictSerializer):
    """The non-file fields of `POST /v1/skills/{id}/versions`: none."""


class SkillUploadSerializer(serializers.Serializer):  # type: ignore[type-arg]
    """The multipart body of a skill upload (documentation): the bundle's files, paths as filenames."""

    files = serializers.ListField(child=serializers.FileField())
    display_name = serializers.CharField(max_length=255, required=False)


class SkillSourceSerializer(serializers.Serializer):  # type: ignore[type-arg]
    """Where a skill comes from (documentation)."""

    type = serializers.ChoiceField(choices=SOURCES)


class SkillSerializer(ResponseSerializer):
    """The skill object."""

    id = serializers.CharField()
    type = serializers.ChoiceField(choices=["skill"])
    display_name = serializers.CharField()
    latest_version_id = serializers.CharField()
    source = SkillSourceSerializer()  # type: ignore[assignment]  # a field named like Field.source
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()

    @classmethod
    def render(cls, skill: Skill) -> dict[str, Any]:
        return {
            "id": skill.id,
            "type": "skill",
            "display_name": skill.display_name,
            "latest_version_id": skill.latest_version,
            "source": {"type": "custom"},
            "created_at": timestamp(skill.created_at),
            "updated_at": timestamp(skill.updated_at),
        }


class SkillVersionSerializer(ResponseSerializer):
    """The skill version object."""

    id = serializers.CharField()
    type = serializers.ChoiceField(choices=["skill_version"])
    skill_id = serializers.CharField()
    name = serializers.CharField()
    description = serializers.CharField()
    created_at = serializers.DateTimeField()

    @classmethod
    def render(cls, version: SkillVersion) -> dict[str, Any]:
        return {
            "id": version.version,
            "type": "skill_version",
            "skill_id": version.skill_id,
            "name": version.name,
            "description": version.description,
            "created_at": timestamp(version.created_at),
        }


class SkillDeletedSerializer(serializers.Serializer):  # type: ignore[type-arg]
    """The answer of `DELETE /v1/skills/{id}` (documentation)."""

    id = serializers.CharField()
    type = serializers.ChoiceField(choices=["skill_deleted"])


class SkillVersionDeletedSerializer(serializers.Serializer):  # type: ignore[type-arg]
    """The answer of `DELETE /v1/skills/{id}/versions/{version}` (documentation)."""

    id = serializers.CharField()
    type = serializers.ChoiceField(choices=["skill_version_deleted"])
