"""Validation of memory-store and memory bodies (path rules, content limits, preconditions), and the store,
memory and memory version objects (described and rendered by their response serializers)."""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from rest_framework import serializers

from registry.core.fields import MetadataField, StrictCharField, StrictSerializer
from registry.core.serialization import ResponseSerializer, timestamp
from registry.memory.models import Memory, MemoryStore, MemoryVersion

MAX_PATH_BYTES = 1024
MAX_SEGMENTS = 20
MAX_CONTENT_BYTES = 102_400
SHA256 = re.compile(r"^[0-9a-f]{64}$")
FORBIDDEN_CATEGORIES = {"Cc", "Cf", "Zl", "Zp"}


def path_problem(path: str) -> str | None:
    """Why `path` is not a valid memory path, or None."""
    if not path.startswith("/"):
        return "must start with '/'."
    if unicodedata.normalize("NFC", path) != path:
        return "must be in Unicode Normalization Form C."
    if len(path.encode()) > MAX_PATH_BYTES:
        return f"must be at most {MAX_PATH_BYTES} bytes."
    if any(unicodedata.category(character) in FORBIDDEN_CATEGORIES for character in path):
        return "must not contain control, format or separator characters."
    segments = path[1:].split("/")
    if not 1 <= len(segments) <= MAX_SEGMENTS:
        return f"must have 1 to {MAX_SEGMENTS} segments."
    if any(segment in ("", ".", "..") for segment in segments):
        return "segments must not be empty, '.' or '..'."
    return None


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

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.partial:
            self.fields["metadata"] = MetadataField(required=False, allow_null_values=True)

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


class MemoryStoreSerializer(ResponseSerializer):
    """The memory store object."""

    id = serializers.CharField()
    type = serializers.ChoiceField(choices=["memory_store"])
    name = serializers.CharField()
    description = serializers.CharField()
    metadata = serializers.DictField(child=serializers.CharField())
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    archived_at = serializers.DateTimeField(allow_null=True)

    @classmethod
    def render(cls, store: MemoryStore) -> dict[str, Any]:
        return {
            "id": store.id,
            "type": "memory_store",
            "name": store.name,
            "description": store.description,
            "metadata": store.metadata,
            "created_at": timestamp(store.created_at),
            "updated_at": timestamp(store.updated_at),
            "archived_at": timestamp(store.archived_at),
        }


class MemorySerializer(ResponseSerializer):
    """The memory object; its `content` only in the full view."""

    id = serializers.CharField()
    type = serializers.ChoiceField(choices=["memory"])
    memory_store_id = serializers.CharField()
    memory_version_id = serializers.CharField()
    path = serializers.CharField()
    content_sha256 = serializers.CharField()
    content_size_bytes = serializers.IntegerField()
    content = serializers.CharField(allow_null=True)
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()

    @classmethod
    def render(cls, memory: Memory, *, full: bool) -> dict[str, Any]:
        return {
            "id": memory.id,
            "type": "memory",
            "memory_store_id": memory.store_id,
            "memory_version_id": memory.version_id,
            "path": memory.path,
            "content_sha256": memory.content_sha256,
            "content_size_bytes": memory.content_size_bytes,
            "content": memory.content if full else None,
            "created_at": timestamp(memory.created_at),
            "updated_at": timestamp(memory.updated_at),
        }


class MemoryVersionSerializer(ResponseSerializer):
    """The memory version object; its `content` only in the full view."""

    id = serializers.CharField()
    type = serializers.ChoiceField(choices=["memory_version"])
    memory_id = serializers.CharField()
    memory_store_id = serializers.CharField()
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
        return {
            "id": version.id,
            "type": "memory_version",
            "memory_id": version.memory_id,
            "memory_store_id": version.store_id,
            "operation": version.operation,
            "path": version.path,
            "content": version.content if full else None,
            "content_sha256": version.content_sha256,
            "content_size_bytes": version.content_size_bytes,
            "created_by": version.created_by,
            "created_at": timestamp(version.created_at),
            "redacted_at": timestamp(version.redacted_at),
            "redacted_by": version.redacted_by,
        }
