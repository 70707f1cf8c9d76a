"""Serializer fields shared by the registry apps: tagged unions, metadata maps, JSON Schema; and `validated`,
a body as a serializer validates it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import jsonschema
from drf_spectacular.utils import PolymorphicProxySerializer, extend_schema_field
from rest_framework import serializers

METADATA_MAX_PAIRS = 16
METADATA_KEY_MAX = 64
METADATA_VALUE_MAX = 512


class TaggedUnionField(serializers.Field):  # type: ignore[type-arg]
    """An object whose `type` picks the serializer that validates it."""

    def __init__(self, choices: Mapping[str, type[serializers.Serializer[Any]]], **kwargs: Any) -> None:
        self.choices = choices
        component_name = kwargs.pop("component_name", None) or "Union" + "".join(c.__name__ for c in choices.values())
        super().__init__(**kwargs)
        extend_schema_field(
            PolymorphicProxySerializer(
                component_name=component_name,
                # Keyed by `type`: from a bare list spectacular cannot read the tag and maps every one to null.
                serializers=dict(choices),
                resource_type_field_name="type",
            )
        )(self)  # type: ignore[type-var]

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, dict):
            raise serializers.ValidationError("must be an object.")
        kind = data.get("type")
        serializer_class = self.choices.get(kind) if isinstance(kind, str) else None
        if serializer_class is None:
            raise serializers.ValidationError({"type": [f"must be one of {sorted(self.choices)}."]})
        return validated(serializer_class, data, context=self.context)

    def to_representation(self, value: Any) -> Any:
        return value


def validated(serializer_class: type[serializers.BaseSerializer[Any]], data: Any, **options: Any) -> dict[str, Any]:
    """`data` as `serializer_class` validates it (a 400 naming the fields when it is not valid), as a dict."""
    serializer = serializer_class(data=data, **options)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


class StrictCharField(serializers.CharField):
    """A string, and only a string: numbers and booleans are not silently turned into text."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return str(super().to_internal_value(data))


class StrictBooleanField(serializers.BooleanField):
    """A JSON boolean, not "yes", "1" or 1."""

    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            self.fail("invalid", input=data)
        return data


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer, not a numeric string or a boolean."""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return int(super().to_internal_value(data))


class StrictSerializer(serializers.Serializer):  # type: ignore[type-arg]
    """A serializer that refuses fields it does not know, naming them."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({name: ["unknown field."] for name in unknown})
        return super().to_internal_value(data)


class MetadataField(serializers.DictField):  # type: ignore[type-arg]
    """`metadata`: at most 16 string pairs; keys up to 64, values up to 512 characters.

    In an update (a serializer bound with `partial=True`), or with `allow_null_values`, a null value deletes
    its key.
    """

    def __init__(self, *, allow_null_values: bool = False, **kwargs: Any) -> None:
        self.allow_null_values = allow_null_values
        super().__init__(
            child=StrictCharField(
                allow_blank=True, allow_null=allow_null_values, max_length=METADATA_VALUE_MAX, trim_whitespace=False
            ),
            **kwargs,
        )

    def bind(self, field_name: str, parent: Any) -> None:
        super().bind(field_name, parent)
        if getattr(parent, "partial", False):
            self.allow_null_values = self.child.allow_null = True

    def to_internal_value(self, data: Any) -> dict[str, str | None]:
        value: dict[str, str | None] = super().to_internal_value(data)
        if len(value) > METADATA_MAX_PAIRS:
            raise serializers.ValidationError(f"at most {METADATA_MAX_PAIRS} pairs.")
        too_long = [key for key in value if not 1 <= len(key) <= METADATA_KEY_MAX]
        if too_long:
            raise serializers.ValidationError(f"keys must be 1 to {METADATA_KEY_MAX} characters.")
        return value


def merge_metadata(current: dict[str, str], changes: dict[str, str | None]) -> dict[str, str]:
    """Apply a metadata patch: a string upserts its key, null removes it."""
    merged = dict(current)
    for key, value in changes.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    if len(merged) > METADATA_MAX_PAIRS:
        raise serializers.ValidationError({"metadata": [f"at most {METADATA_MAX_PAIRS} pairs."]})
    return merged


@extend_schema_field(
    {
        "type": "object",
        "additionalProperties": True,
        "properties": {"type": {"type": "string", "enum": ["object"]}},
        "required": ["type"],
    }
)
class JsonSchemaObjectField(serializers.JSONField):
    """A JSON Schema describing an object: `type: object`, and valid against the metaschema."""

    def to_internal_value(self, data: Any) -> Any:
        value = super().to_internal_value(data)
        if not isinstance(value, dict) or value.get("type") != "object":
            raise serializers.ValidationError('must be a JSON Schema object with "type": "object".')
        try:
            jsonschema.validators.validator_for(value, default=jsonschema.Draft202012Validator).check_schema(value)
        except jsonschema.SchemaError as error:
            where = "/".join(str(part) for part in error.absolute_path) or "(root)"
            raise serializers.ValidationError(f"is not a valid JSON Schema at {where}: {error.message}") from error
        return value


def validate_http_url(value: str) -> None:
    """An absolute http(s) URL; bare service host names (as inside a cluster) are allowed."""
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise serializers.ValidationError("must be an absolute http or https URL.")
