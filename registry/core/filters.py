"""List filters shared by the apps."""

from __future__ import annotations

import datetime
from typing import Any

import django_filters
from django.core.exceptions import ValidationError
from django_filters.fields import IsoDateTimeField
from django_filters.rest_framework import DjangoFilterBackend


class UtcIsoDateTimeField(IsoDateTimeField):
    """An ISO 8601 time, taken to UTC: Python accepts offsets up to ±23:59 that PostgreSQL refuses
    (±15:59), and a time whose UTC form falls outside years 1-9999 is bad input, not a server error."""

    def to_python(self, value: Any) -> datetime.datetime | None:
        parsed = super().to_python(value)
        if parsed is None:
            return None
        try:
            return parsed.astimezone(datetime.UTC)
        except OverflowError:
            raise ValidationError("the time is out of range once taken to UTC", code="invalid") from None


class UtcDateTimeFilter(django_filters.IsoDateTimeFilter):
    """An `IsoDateTimeFilter` whose value is compared in UTC (`UtcIsoDateTimeField`)."""

    field_class = UtcIsoDateTimeField


class CreatedAtRangeFilter(django_filters.FilterSet):
    """`created_at_gte` and `created_at_lte`: the list's items created in a time range."""

    created_at_gte = UtcDateTimeFilter(field_name="created_at", lookup_expr="gte")
    created_at_lte = UtcDateTimeFilter(field_name="created_at", lookup_expr="lte")


class BracketedFilterBackend(DjangoFilterBackend):
    """django-filter's backend that also reads the reference client's bracketed parameters: it sends
    `created_at[gte]` where our filters are named `created_at_gte`; a bracketed name is read as the
    underscored one when the list has no filter of the underscored name given already."""

    def get_filterset_kwargs(self, request: Any, queryset: Any, view: Any) -> dict[str, Any]:
        kwargs: dict[str, Any] = super().get_filterset_kwargs(request, queryset, view)
        data = kwargs["data"]
        bracketed = [key for key in data if key.endswith("]") and "[" in key]
        if bracketed:
            data = data.copy()
            for key in bracketed:
                name = key[:-1].replace("[", "_", 1)
                if name not in data:
                    data.setlist(name, data.getlist(key))
            kwargs["data"] = data
        return kwargs
