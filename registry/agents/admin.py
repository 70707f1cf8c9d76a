"""Django admin for agents and their versions (read-only history)."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from registry.agents.models import Agent, AgentVersion
from registry.core.admin import ReadOnlyInline


class AgentVersionInline(ReadOnlyInline):
    model = AgentVersion
    fields = ("version", "created_at", "spec")
    ordering = ("-version",)


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Agents change only through the API (every change is a version); staff can read and archive."""

    list_display = ("id", "name", "workspace", "version", "created_at", "archived_at")
    list_filter = ("archived_at",)
    search_fields = ("id", "name")
    readonly_fields = ("id", "workspace", "name", "version", "spec", "created_at", "updated_at")
    fields = (*readonly_fields, "archived_at")
    inlines = [AgentVersionInline]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False
