"""List filters for sessions, events and threads."""

from __future__ import annotations

import django_filters
from django.db import connection
from django.db.models import QuerySet

from registry.core.filters import UtcDateTimeFilter
from registry.sessions.events import PUBLIC_TYPES
from registry.sessions.models import Session, SessionEvent, SessionThread


class SessionFilter(django_filters.FilterSet):
    agent_id = django_filters.CharFilter(field_name="agent_id")
    agent_version = django_filters.NumberFilter(field_name="agent_version")
    statuses = django_filters.MultipleChoiceFilter(field_name="status", choices=Session.Status.choices)
    created_at_gt = UtcDateTimeFilter(field_name="created_at", lookup_expr="gt")
    created_at_gte = UtcDateTimeFilter(field_name="created_at", lookup_expr="gte")
    created_at_lt = UtcDateTimeFilter(field_name="created_at", lookup_expr="lt")
    created_at_lte = UtcDateTimeFilter(field_name="created_at", lookup_expr="lte")
    memory_store_id = django_filters.CharFilter(method="filter_memory_store")

    class Meta:
        model = Session
        fields: list[str] = []

    def filter_memory_store(self, queryset: QuerySet[Session], name: str, value: str) -> QuerySet[Session]:
        if connection.vendor == "postgresql":
            return queryset.filter(resources__contains=[{"memory_store_id": value}])
        # SQLite has no JSON containment; the id's own quotes make the text match exact.
        return queryset.filter(resources__icontains=f'"memory_store_id": "{value}"')


class EventFilter(django_filters.FilterSet):
    types = django_filters.MultipleChoiceFilter(
        field_name="type", choices=[(name, name) for name in sorted(PUBLIC_TYPES)]
    )
    created_at_gt = UtcDateTimeFilter(field_name="processed_at", lookup_expr="gt")
    created_at_gte = UtcDateTimeFilter(field_name="processed_at", lookup_expr="gte")
    created_at_lt = UtcDateTimeFilter(field_name="processed_at", lookup_expr="lt")
    created_at_lte = UtcDateTimeFilter(field_name="processed_at", lookup_expr="lte")

    class Meta:
        model = SessionEvent
        fields: list[str] = []


class ThreadFilter(django_filters.FilterSet):
    statuses = django_filters.MultipleChoiceFilter(field_name="status", choices=SessionThread.Status.choices)

    class Meta:
        model = SessionThread
        fields: list[str] = []
