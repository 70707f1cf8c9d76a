"""Validation of the upload form's fields, the file object (described and rendered by `FileSerializer`) and
the documented upload and delete shapes."""

from __future__ import annotations

from rest_framework import serializers

from registry.core.fields import StrictSerializer
from registry.core.serialization import ConstantField, ObjectSerializer
from registry.files.models import File

EXPIRES_MIN_SECONDS = 3600
EXPIRES_MAX_SECONDS = 7_776_000


class FileUploadFieldsSerializer(StrictSerializer):
    """The non-file fields of `POST /v1/files` (the `file` part itself is checked by the view)."""

    expires_in_seconds = serializers.IntegerField(
        min_value=EXPIRES_MIN_SECONDS, max_value=EXPIRES_MAX_SECONDS, required=False
    )


class FileUploadSerializer(serializers.Serializer):  # type: ignore[type-arg]
    """The multipart body of `POST /v1/files` (documentation)."""

    file = serializers.FileField()
    expires_in_seconds = serializers.IntegerField(
        min_value=EXPIRES_MIN_SECONDS, max_value=EXPIRES_MAX_SECONDS, required=False
    )


class FileScopeSerializer(serializers.Serializer):  # type: ignore[type-arg]
    """Where a file was created (documentation)."""

    id = serializers.CharField()
    type = serializers.ChoiceField(choices=["session"])


class FileSerializer(ObjectSerializer):
    """The file metadata object."""

    type = ConstantField("file")
    filename = serializers.CharField()
    mime_type = serializers.CharField()
    size_bytes = serializers.IntegerField()
    created_at = serializers.DateTimeField()
    downloadable = serializers.BooleanField()
    expires_at = serializers.DateTimeField(allow_null=True)
    scope = FileScopeSerializer(allow_null=True)

    @staticmethod
    def get_downloadable(file: File) -> bool:
        return not file.expired

    @staticmethod
    def get_scope(file: File) -> None:
        # Only uploads exist so far; files a session creates would carry {"type": "session", "id": ...}.
        return None


class FileDeletedSerializer(serializers.Serializer):  # type: ignore[type-arg]
    """The answer of `DELETE /v1/files/{id}` (documentation)."""

    id = serializers.CharField()
    type = serializers.ChoiceField(choices=["file_deleted"])
