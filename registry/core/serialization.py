"""Rendering of the API's response objects: the `ResponseSerializer` base, the bases that give an object its
`id` and timestamps, and the timestamp format."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from operator import attrgetter
from typing import Any, ClassVar

from rest_framework import serializers
from rest_framework.fields import DateTimeField

_timestamp = DateTimeField()

# Fields whose value is rendered by the field (`str`, `int`, `float`, `bool`, the timestamp format); the
# other fields' values (containers, choices, nested objects) are stored in the shape the API shows.
SCALAR_FIELDS = (
    serializers.CharField,
    serializers.IntegerField,
    serializers.FloatField,
    serializers.BooleanField,
    serializers.DateTimeField,
)

Reader = Callable[[Any], Any]


def timestamp(value: datetime | None) -> str | None:
    """An ISO 8601 UTC timestamp in the API's format, or None."""
    return None if value is None else _timestamp.to_representation(value)


class MetadataMapField(serializers.DictField):  # type: ignore[type-arg]
    """`metadata` as an object shows it: string pairs."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(child=serializers.CharField(), **kwargs)


class ConstantField(serializers.ChoiceField):
    """A value every object of a kind has (its `type`): documented as a one-value enum, rendered as is."""

    def __init__(self, value: str, **kwargs: Any) -> None:
        self.value = value
        super().__init__(choices=[value], **kwargs)


class ResponseSerializer(serializers.Serializer):  # type: ignore[type-arg]
    """One response object, described and rendered by one class.

    The declared fields describe the object (drf-spectacular reads them for the OpenAPI document);
    the classmethod `render(instance, **options)` builds it as a plain dict, without DRF's per-field
    machinery or a serializer instance per call (the API's speed depends on it: bench/).
    Its top-level keys are the declared field names (a test renders every response serializer).
    DRF's own entry point, `Serializer(instance, context=options).data`, gives the same dict.

    By default `render` reads each declared field off the instance, in the declared order, through
    readers prepared once per class: a static method `get_<field>` of the serializer gives the value
    where the instance has none of that name; a `ConstantField` gives its constant; otherwise the
    instance's attribute named by the field's `source` (or the field's name), None as None, scalars
    as the field represents them and anything else as stored. Subclasses with options, or objects
    assembled from more than their instance's attributes, override `render`.

    The bases below give an object its `id` (its first field, as a base's fields come first) and its
    timestamps, which `trailing_fields` places after every field of the object.
    """

    trailing_fields: ClassVar[tuple[str, ...]] = ()
    readers: ClassVar[tuple[tuple[str, Reader], ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        declared = cls._declared_fields
        trailing = [name for name in cls.trailing_fields if name in declared]
        order = [name for name in declared if name not in trailing] + trailing
        cls._declared_fields = {name: declared[name] for name in order}
        cls.readers = tuple((name, cls.reader(name, field)) for name, field in cls._declared_fields.items())

    @classmethod
    def reader(cls, name: str, field: serializers.Field[Any, Any, Any, Any]) -> Reader:
        """How `render` reads the field `name` off an instance."""
        method = f"get_{name}"
        if hasattr(cls, method) and not hasattr(serializers.Serializer, method):
            read: Reader = getattr(cls, method)
            return read
        if isinstance(field, ConstantField):
            value = field.value
            return lambda instance: value
        attribute = attrgetter(field.source or name)
        if not isinstance(field, SCALAR_FIELDS):
            return attribute
        represent = field.to_representation

        def scalar(instance: Any) -> Any:
            value = attribute(instance)
            return None if value is None else represent(value)

        return scalar

    @classmethod
    def render(cls, *args: Any, **options: Any) -> dict[str, Any]:
        """The API object of the instance (the first argument); subclasses name their own options."""
        instance = args[0]
        return {name: read(instance) for name, read in cls.readers}

    def to_representation(self, instance: Any) -> dict[str, Any]:
        return self.render(instance, **self.context)


class ObjectSerializer(ResponseSerializer):
    """An object with an `id`, its first field."""

    id = serializers.CharField()


class CreatedObjectSerializer(ObjectSerializer):
    """An object with an `id` first and `created_at` last."""

    trailing_fields: ClassVar[tuple[str, ...]] = ("created_at",)

    created_at = serializers.DateTimeField()


class TimestampedObjectSerializer(CreatedObjectSerializer):
    """An object with an `id` first and `created_at`, `updated_at` last."""

    trailing_fields: ClassVar[tuple[str, ...]] = ("created_at", "updated_at")

    updated_at = serializers.DateTimeField()


class ArchivableObjectSerializer(TimestampedObjectSerializer):
    """An object with an `id` first and `created_at`, `updated_at`, `archived_at` last."""

    trailing_fields: ClassVar[tuple[str, ...]] = ("created_at", "updated_at", "archived_at")

    archived_at = serializers.DateTimeField(allow_null=True)
