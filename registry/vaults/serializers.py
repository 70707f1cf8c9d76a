"""Validation of vault and credential bodies (three credential types, secrets in the right shape), and the
vault and credential objects (described and rendered by `VaultSerializer`, `CredentialSerializer`)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from registry.core.fields import (
    MetadataField,
    StrictBooleanField,
    StrictCharField,
    StrictSerializer,
    TaggedUnionField,
    validate_http_url,
)
from registry.core.serialization import ArchivableObjectSerializer, ConstantField, MetadataMapField
from registry.sandbox.hostnames import MAX_CREDENTIAL_HOSTS, parse_host_entry


def secret_field() -> StrictCharField:
    """A secret: a non-empty string, never echoed back."""
    return StrictCharField(write_only=True, min_length=1, max_length=16_384, trim_whitespace=False)


class StaticBearerSerializer(StrictSerializer):
    type = serializers.ChoiceField(choices=["static_bearer"])
    token = secret_field()
    mcp_server_url = StrictCharField(max_length=2048, validators=[validate_http_url])


class TokenEndpointNoneSerializer(StrictSerializer):
    type = serializers.ChoiceField(choices=["none"])


class TokenEndpointSecretSerializer(StrictSerializer):
    type = serializers.ChoiceField(choices=["client_secret_basic", "client_secret_post"])
    client_secret = secret_field()


TOKEN_ENDPOINT_AUTH = {
    "none": TokenEndpointNoneSerializer,
    "client_secret_basic": TokenEndpointSecretSerializer,
    "client_secret_post": TokenEndpointSecretSerializer,
}


class OAuthRefreshSerializer(StrictSerializer):
    client_id = StrictCharField(max_length=512)
    refresh_token = secret_field()
    token_endpoint = StrictCharField(max_length=2048, validators=[validate_http_url])
    token_endpoint_auth = TaggedUnionField(TOKEN_ENDPOINT_AUTH, component_name="TokenEndpointAuth")
    resource = StrictCharField(required=False, allow_null=True, max_length=2048)
    scope = StrictCharField(required=False, allow_null=True, max_length=2048)


class McpOAuthSerializer(StrictSerializer):
    type = serializers.ChoiceField(choices=["mcp_oauth"])
    access_token = secret_field()
    mcp_server_url = StrictCharField(max_length=2048, validators=[validate_http_url])
    expires_at = serializers.DateTimeField(required=False, allow_null=True)
    refresh = OAuthRefreshSerializer(required=False, allow_null=True)


def validate_credential_host(entry: str) -> None:
    """A bare hostname, an IPv4 address or a `*.` wildcard, with an optional `:port` (our extension)."""
    try:
        parse_host_entry(entry)
    except ValueError as error:
        raise serializers.ValidationError(str(error)) from None


class NetworkingSerializer(StrictSerializer):
    type = serializers.ChoiceField(choices=["unrestricted", "limited"])
    allowed_hosts = serializers.ListField(
        child=StrictCharField(max_length=259, validators=[validate_credential_host], trim_whitespace=False),
        required=False,
        max_length=MAX_CREDENTIAL_HOSTS,
    )


class InjectionLocationSerializer(StrictSerializer):
    body = StrictBooleanField(required=False)
    header = StrictBooleanField(required=False)


class EnvironmentVariableSerializer(StrictSerializer):
    type = serializers.ChoiceField(choices=["environment_variable"])
    secret_name = serializers.RegexField(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
    secret_value = secret_field()
    networking = NetworkingSerializer()
    injection_location = InjectionLocationSerializer(required=False)


AUTH_KINDS = {
    "static_bearer": StaticBearerSerializer,
    "mcp_oauth": McpOAuthSerializer,
    "environment_variable": EnvironmentVariableSerializer,
}


# -- updates: the reference client's `*UpdateParams`; what is left out keeps its value ------------------
def optional_secret() -> StrictCharField:
    return StrictCharField(
        required=False, allow_null=True, write_only=True, min_length=1, max_length=16_384, trim_whitespace=False
    )


class StaticBearerUpdateSerializer(StrictSerializer):
    """`mcp_server_url` is immutable: only the token changes (the same URL may be sent again)."""

    type = serializers.ChoiceField(choices=["static_bearer"])
    token = optional_secret()
    mcp_server_url = StrictCharField(required=False, max_length=2048)


class TokenEndpointSecretUpdateSerializer(StrictSerializer):
    type = serializers.ChoiceField(choices=["client_secret_basic", "client_secret_post"])
    client_secret = optional_secret()


class OAuthRefreshUpdateSerializer(StrictSerializer):
    refresh_token = optional_secret()
    scope = StrictCharField(required=False, allow_null=True, allow_blank=True, max_length=2048)
    token_endpoint_auth = TokenEndpointSecretUpdateSerializer(required=False)


class McpOAuthUpdateSerializer(StrictSerializer):
    type = serializers.ChoiceField(choices=["mcp_oauth"])
    access_token = optional_secret()
    expires_at = serializers.DateTimeField(required=False, allow_null=True)
    refresh = OAuthRefreshUpdateSerializer(required=False, allow_null=True)
    mcp_server_url = StrictCharField(required=False, max_length=2048)


class EnvironmentVariableUpdateSerializer(StrictSerializer):
    """`secret_name` is immutable."""

    type = serializers.ChoiceField(choices=["environment_variable"])
    secret_value = optional_secret()
    secret_name = StrictCharField(required=False, max_length=128)
    networking = NetworkingSerializer(required=False, allow_null=True)
    injection_location = InjectionLocationSerializer(required=False)


AUTH_UPDATE_KINDS = {
    "static_bearer": StaticBearerUpdateSerializer,
    "mcp_oauth": McpOAuthUpdateSerializer,
    "environment_variable": EnvironmentVariableUpdateSerializer,
}


class VaultWriteSerializer(StrictSerializer):
    display_name = StrictCharField(min_length=1, max_length=255)
    metadata = MetadataField(required=False)


class CredentialWriteSerializer(StrictSerializer):
    """Create (`partial=False`) and update (`partial=True`: `auth` in the update shapes, merged into the
    credential's auth; immutable fields are refused)."""

    auth = TaggedUnionField(AUTH_KINDS, component_name="CredentialAuth")
    display_name = StrictCharField(required=False, allow_null=True, max_length=255)
    metadata = MetadataField(required=False)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.partial:
            self.fields["auth"] = TaggedUnionField(AUTH_UPDATE_KINDS, component_name="CredentialAuthUpdate")


class VaultSerializer(ArchivableObjectSerializer):
    """The vault object."""

    type = ConstantField("vault")
    display_name = serializers.CharField()
    metadata = MetadataMapField()


class CredentialSerializer(ArchivableObjectSerializer):
    """The credential object: `auth` without any secret."""

    type = ConstantField("vault_credential")
    vault_id = serializers.CharField()
    display_name = serializers.CharField(allow_null=True)
    metadata = MetadataMapField()
    auth = serializers.DictField()
