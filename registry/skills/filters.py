"""List filters for skills: `source` (every skill stored here is `custom`)."""

from __future__ import annotations

import django_filters
from django.db.models import QuerySet

from registry.skills.models import Skill
from registry.skills.serializers import SOURCES


class SkillFilter(django_filters.FilterSet):
    """`source=custom` lists every skill of the workspace; the other sources hold none here."""

    source = django_filters.ChoiceFilter(choices=[(source, source) for source in SOURCES], method="filter_source")

    class Meta:
        model = Skill
        fields: list[str] = []

    def filter_source(self, queryset: QuerySet[Skill], name: str, value: str) -> QuerySet[Skill]:
        return queryset if value == "custom" else queryset.none()
