"""Validation of environment bodies, and the environment object (described and rendered by
`EnvironmentSerializer`)."""

from __future__ import annotations

import re

from django.core.validators import RegexValidator
from rest_framework import serializers

from registry.core.fields import MetadataField, StrictBooleanField, StrictCharField, StrictSerializer, TaggedUnionField
from registry.core.serialization import ArchivableObjectSerializer, ConstantField, MetadataMapField

PACKAGE_MANAGERS = ("apt", "cargo", "gem", "go", "npm", "pip")
SCOPES = ("organization",)
# What pip, npm, apt, cargo, gem and go specifiers need, and nothing a shell or an option parser would
# read specially (installers get argument lists, but a name is never an option or a shell word).
PACKAGE_NAME = RegexValidator(
    re.compile(r"\A[A-Za-z0-9._+=<>!~@/:\[\],][A-Za-z0-9._+=<>!~@/:\[\],-]*\Z"),
    "Package names are letters, digits and ._-+=<>!~@/:[], (no whitespace or shell characters, no leading -).",
)


def package_list() -> serializers.ListField:
    return serializers.ListField(
        child=StrictCharField(min_length=1, max_length=256, validators=[PACKAGE_NAME]),
        required=False,
        allow_null=True,
        max_length=512,
    )


class PackagesSerializer(StrictSerializer):
    type = serializers.ChoiceField(choices=["packages"], required=False)
    apt = package_list()
    cargo = package_list()
    gem = package_list()
    go = package_list()
    npm = package_list()
    pip = package_list()


class UnrestrictedNetworkSerializer(StrictSerializer):
    type = serializers.ChoiceField(choices=["unrestricted"])


class LimitedNetworkSerializer(StrictSerializer):
    type = serializers.ChoiceField(choices=["limited"])
    allow_mcp_servers = StrictBooleanField(required=False, allow_null=True)
    allow_package_managers = StrictBooleanField(required=False, allow_null=True)
    allowed_hosts = serializers.ListField(
        child=StrictCharField(min_length=1, max_length=253), required=False, allow_null=True, max_length=256
    )


NETWORK_KINDS = {"unrestricted": UnrestrictedNetworkSerializer, "limited": LimitedNetworkSerializer}


class CloudConfigSerializer(StrictSerializer):
    type = serializers.ChoiceField(choices=["cloud"])
    networking = TaggedUnionField(
        NETWORK_KINDS, component_name="EnvironmentNetworking", required=False, allow_null=True
    )
    packages = PackagesSerializer(required=False, allow_null=True)


class SelfHostedConfigSerializer(StrictSerializer):
    type = serializers.ChoiceField(choices=["self_hosted"])


CONFIG_KINDS = {"cloud": CloudConfigSerializer, "self_hosted": SelfHostedConfigSerializer}


class EnvironmentWriteSerializer(StrictSerializer):
    """The body of create (`partial=False`) and update (`partial=True`)."""

    name = StrictCharField(min_length=1, max_length=256)
    description = StrictCharField(max_length=2048, required=False, allow_null=True, allow_blank=True)
    config = TaggedUnionField(CONFIG_KINDS, component_name="EnvironmentConfig", required=False, allow_null=True)
    metadata = MetadataField(required=False)
    scope = serializers.ChoiceField(choices=SCOPES, required=False, allow_null=True)


class EnvironmentSerializer(ArchivableObjectSerializer):
    """The environment object."""

    type = ConstantField("environment")
    name = serializers.CharField()
    description = serializers.CharField(allow_null=True)
    metadata = MetadataMapField()
    config = TaggedUnionField(CONFIG_KINDS, component_name="EnvironmentConfig")
    scope = serializers.ChoiceField(choices=SCOPES)
