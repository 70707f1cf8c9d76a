"""List filters for deployments and deployment runs, under the names the reference client sends
(`created_at[gte]`) and the registry's own (`created_at_gte`)."""

from __future__ import annotations

import django_filters
from django.db.models import QuerySet

from registry.core.filters import UtcDateTimeFilter
from registry.deployments.models import Deployment, DeploymentRun


def created_at_filters(*lookups: str) -> dict[str, django_filters.Filter]:
    """`created_at[<lookup>]` and `created_at_<lookup>` for each lookup (`gt`, `gte`, `lt`, `lte`)."""
    return {
        name: UtcDateTimeFilter(field_name="created_at", lookup_expr=lookup)
        for lookup in lookups
        for name in (f"created_at[{lookup}]", f"created_at_{lookup}")
    }


class DeploymentFilter(django_filters.FilterSet):
    agent_id = django_filters.CharFilter(field_name="agent_id")
    status = django_filters.ChoiceFilter(field_name="status", choices=Deployment.Status.choices)

    class Meta:
        model = Deployment
        fields: list[str] = []


class DeploymentRunFilter(django_filters.FilterSet):
    deployment_id = django_filters.CharFilter(field_name="deployment_id")
    trigger_type = django_filters.ChoiceFilter(field_name="trigger_type", choices=DeploymentRun.TriggerType.choices)
    has_error = django_filters.BooleanFilter(method="filter_has_error")

    class Meta:
        model = DeploymentRun
        fields: list[str] = []

    def filter_has_error(self, queryset: QuerySet[DeploymentRun], name: str, value: bool) -> QuerySet[DeploymentRun]:
        """true: runs with an `error`; false: runs with a `session_id`."""
        if value:
            return queryset.filter(error__isnull=False)
        return queryset.filter(session_id__isnull=False)


# Names with brackets cannot be class attributes; a FilterSet reads its filters from `base_filters`.
DeploymentFilter.base_filters.update(created_at_filters("gte", "lte"))
DeploymentRunFilter.base_filters.update(created_at_filters("gt", "gte", "lt", "lte"))
