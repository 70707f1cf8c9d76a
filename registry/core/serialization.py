"""Rendering of the API's response objects: the `ResponseSerializer` base and the timestamp format."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from rest_framework import serializers
from rest_framework.fields import DateTimeField

_timestamp = DateTimeField()


def timestamp(value: datetime | None) -> str | None:
    """An ISO 8601 UTC timestamp in the API's format, or None."""
    return None if value is None else _timestamp.to_representation(value)


class ResponseSerializer(serializers.Serializer):  # type: ignore[type-arg]
    """One response object, described and rendered by one class.

    The declared fields describe the object (drf-spectacular reads them for the OpenAPI document);
    the classmethod `render(instance, **options)` builds it as a plain dict by hand, without DRF's
    per-field machinery or a serializer instance per call (the API's speed depends on it: bench/).
    Its top-level keys are the declared field names (a test renders every response serializer).
    DRF's own entry point, `Serializer(instance, context=options).data`, gives the same dict.
    """

    @classmethod
    def render(cls, *args: Any, **options: Any) -> dict[str, Any]:
        """The API object of the instance (the first argument); subclasses name their own options."""
        raise NotImplementedError

    def to_representation(self, instance: Any) -> dict[str, Any]:
        return self.render(instance, **self.context)
