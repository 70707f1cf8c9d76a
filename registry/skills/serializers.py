"""Validation of the skill upload forms, the skill and version objects (described and rendered by
`SkillSerializer`, `SkillVersionSerializer`) and the documented upload and delete shapes."""

from __future__ import annotations

from rest_framework import serializers

from registry.core.fields import StrictSerializer
from registry.core.serialization import ConstantField, CreatedObjectSerializer, TimestampedObjectSerializer
from registry.skills.models import Skill

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


class SkillSerializer(TimestampedObjectSerializer):
    """The skill object."""

    type = ConstantField("skill")
    display_name = serializers.CharField()
    latest_version_id = serializers.CharField(source="latest_version")
    source = SkillSourceSerializer()  # type: ignore[assignment]  # a field named like Field.source

    @staticmethod
    def get_source(skill: Skill) -> dict[str, str]:
        return {"type": "custom"}


class SkillVersionSerializer(CreatedObjectSerializer):
    """The skill version object."""

    id = serializers.CharField(source="version")
    type = ConstantField("skill_version")
    skill_id = serializers.CharField()
    name = serializers.CharField()
    description = serializers.CharField()


class SkillDeletedSerializer(serializers.Serializer):  # type: ignore[type-arg]
    """The answer of `DELETE /v1/skills/{id}` (documentation)."""

    id = serializers.CharField()
    type = serializers.ChoiceField(choices=["skill_deleted"])


class SkillVersionDeletedSerializer(serializers.Serializer):  # type: ignore[type-arg]
    """The answer of `DELETE /v1/skills/{id}/versions/{version}` (documentation)."""

    id = serializers.CharField()
    type = serializers.ChoiceField(choices=["skill_version_deleted"])
