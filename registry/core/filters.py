"""List filters shared by the apps."""

from __future__ import annotations

import django_filters


class CreatedAtRangeFilter(django_filters.FilterSet):
    """`created_at_gte` and `created_at_lte`: the list's items created in a time range."""

    created_at_gte = django_filters.IsoDateTimeFilter(field_name="created_at", lookup_expr="gte")
    created_at_lte = django_filters.IsoDateTimeFilter(field_name="created_at", lookup_expr="lte")
