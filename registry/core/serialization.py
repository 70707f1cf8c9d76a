"""Rendering helpers shared by the apps' selectors."""

from __future__ import annotations

from datetime import datetime

from rest_framework.fields import DateTimeField

_timestamp = DateTimeField()


def timestamp(value: datetime | None) -> str | None:
    """An ISO 8601 UTC timestamp in the API's format, or None."""
    return None if value is None else _timestamp.to_representation(value)
