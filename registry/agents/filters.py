"""List filters for agents."""

from __future__ import annotations

import django_filters

from registry.agents.models import Agent


class AgentFilter(django_filters.FilterSet):
    created_at_gte = django_filters.IsoDateTimeFilter(field_name="created_at", lookup_expr="gte")
    created_at_lte = django_filters.IsoDateTimeFilter(field_name="created_at", lookup_expr="lte")

    class Meta:
        model = Agent
        fields: list[str] = []
