"""Validation of memory-store and memory bodies (path rules, content limits, preconditions), and the store,
memory and memory version objects (described and rendered by their response serializers)."""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from rest_framework import serializers

from registry.core.fields import MetadataField, StrictCharField, StrictSerializer
from registry.core.serialization import (
    ArchivableObjectSerializer,
    ConstantField,
    MetadataMapField,
    ObjectSerializer,
    TimestampedObjectSerializer,
)
from registry.memory.models import Memory, MemoryVersion
from registry.memory.services import MAX_CONTENT_BYTES, path_problem

SHA256 = re.compile(r"^[0-9a-f]{64}$")


def validate_path(path: str) -> None:
    problem = path_problem(path)
    if problem:
        raise serializers.ValidationError(problem)


def validate_content(content: str) -> None:
    if len(content.encode()) > MAX_CONTENT_BYTES:
        raise serializers.ValidationError(f"must be at most {MAX_CONTENT_BYTES} bytes (UTF-8).")


class MemoryStoreWriteSerializer(StrictSerializer):
    name = StrictCharField(min_length=1, max_length=255)
    description = StrictCharField(required=False, allow_blank=True, allow_null=True, max_length=4096)
    metadata = MetadataField(required=False)

    def validate_name(self, value: str) -> str:
        if any(unicodedata.category(character) == "Cc" for character in value):
            raise serializers.ValidationError("must not contain control characters.")
        return value


class PreconditionSerializer(StrictSerializer):
    type = serializers.ChoiceField(choices=["content_sha256"])
    content_sha256 = serializers.RegexField(SHA256, error_messages={"invalid": "64 lowercase hex characters."})


class MemoryCreateSerializer(StrictSerializer):
    path = StrictCharField(trim_whitespace=False, validators=[validate_path])
    content = StrictCharField(allow_blank=True, allow_null=True, trim_whitespace=False, validators=[validate_content])
    view = serializers.ChoiceField(choices=["basic", "full"], required=False)


class MemoryUpdateSerializer(StrictSerializer):
    path = StrictCharField(required=False, allow_null=True, trim_whitespace=False, validators=[validate_path])
    content = StrictCharField(
        required=False, allow_null=True, allow_blank=True, trim_whitespace=False, validators=[validate_content]
    )
    precondition = PreconditionSerializer(required=False)
    view = serializers.ChoiceField(choices=["basic", "full"], required=False)


class MemoryStoreSerializer(ArchivableObjectSerializer):
    """The memory store object."""

    type = ConstantField("memory_store")
    name = serializers.CharField()
    description = serializers.CharField()
    metadata = MetadataMapField()


class MemorySerializer(TimestampedObjectSerializer):
    """The memory object; its `content` only in the full view."""

    type = ConstantField("memory")
    memory_store_id = serializers.CharField(source="store_id")
    memory_version_id = serializers.CharField(source="version_id")
    path = serializers.CharField()
    content_sha256 = serializers.CharField()
    content_size_bytes = serializers.IntegerField()
    content = serializers.CharField(allow_null=True)

    @classmethod
    def render(cls, memory: Memory, *, full: bool) -> dict[str, Any]:
        return without_content(super().render(memory), full=full)


class MemoryVersionSerializer(ObjectSerializer):
    """The memory version object; its `content` only in the full view."""

    type = ConstantField("memory_version")
    memory_id = serializers.CharField()
    memory_store_id = serializers.CharField(source="store_id")
    operation = serializers.ChoiceField(choices=["created", "modified", "deleted"])
    path = serializers.CharField(allow_null=True)
    content = serializers.CharField(allow_null=True)
    content_sha256 = serializers.CharField(allow_null=True)
    content_size_bytes = serializers.IntegerField(allow_null=True)
    created_by = serializers.DictField()
    created_at = serializers.DateTimeField()
    redacted_at = serializers.DateTimeField(allow_null=True)
    redacted_by = serializers.DictField(allow_null=True)

    @classmethod
    def render(cls, version: MemoryVersion, *, full: bool) -> dict[str, Any]:
        return without_content(super().render(version), full=full)


def without_content(rendered: dict[str, Any], *, full: bool) -> dict[str, Any]:
    """A memory or version object in the basic view (`content` null), or as it is in the full view."""
    if not full:
        rendered["content"] = None
    return rendered
