"""List filters for memory stores and memory versions."""

from __future__ import annotations

import django_filters

from registry.core.filters import CreatedAtRangeFilter, UtcDateTimeFilter
from registry.memory.models import MemoryStore, MemoryVersion


class MemoryStoreFilter(CreatedAtRangeFilter):
    class Meta:
        model = MemoryStore
        fields: list[str] = []


class MemoryVersionFilter(django_filters.FilterSet):
    memory_id = django_filters.CharFilter(field_name="memory_id")
    operation = django_filters.ChoiceFilter(field_name="operation", choices=MemoryVersion.Operation.choices)
    api_key_id = django_filters.CharFilter(field_name="created_by__api_key_id")
    created_at_gte = UtcDateTimeFilter(field_name="created_at", lookup_expr="gte")
    created_at_lte = UtcDateTimeFilter(field_name="created_at", lookup_expr="lte")

    class Meta:
        model = MemoryVersion
        fields: list[str] = []
