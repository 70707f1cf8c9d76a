"""Validation of git credential bodies, and the git credential object (described and rendered by
`GitCredentialSerializer`)."""

from __future__ import annotations

from rest_framework import serializers

from registry.core.fields import MetadataField, StrictCharField, StrictSerializer
from registry.core.serialization import ArchivableObjectSerializer, ConstantField, MetadataMapField

LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
HOSTNAME = rf"^(?=.{{1,253}}$){LABEL}(?:\.{LABEL})*(?::\d{{1,5}})?$"


class GitCredentialWriteSerializer(StrictSerializer):
    host = serializers.RegexField(HOSTNAME, error_messages={"invalid": "a host name such as github.com."})
    token = StrictCharField(write_only=True, min_length=1, max_length=16_384, trim_whitespace=False)
    username = StrictCharField(required=False, min_length=1, max_length=255)
    display_name = StrictCharField(required=False, allow_null=True, max_length=255)
    metadata = MetadataField(required=False)

    def validate_token(self, value: str) -> str:
        if any(character.isspace() for character in value):
            raise serializers.ValidationError("must not contain whitespace.")
        return value


class GitCredentialSerializer(ArchivableObjectSerializer):
    """The git credential object; the token is never part of it."""

    type = ConstantField("git_credential")
    display_name = serializers.CharField(allow_null=True)
    host = serializers.CharField()
    username = serializers.CharField()
    metadata = MetadataMapField()
