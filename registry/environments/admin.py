"""Django admin for environments, each linked to the sessions that run in it."""

from django.contrib import admin
from django.utils.safestring import SafeString

from registry.core.admin import ArchivableAdmin, changelist_link
from registry.environments.models import Environment


@admin.register(Environment)
class EnvironmentAdmin(ArchivableAdmin):
    list_display = ("id", "name", "workspace", "scope", "created_at", "archived_at")
    list_filter = ("scope", "created_at")
    list_select_related = ("workspace",)
    search_fields = ("id", "name")
    readonly_fields = ("id", "sessions", "created_at", "updated_at")

    @admin.display(description="sessions")
    def sessions(self, environment: Environment) -> SafeString:
        return changelist_link(
            "agent_sessions.Session", f"{environment.sessions.count()} sessions", environment=environment.pk
        )
