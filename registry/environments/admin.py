"""Django admin for environments, each linked to the sessions that run in it. Adds and changes go through the
API's serializer and services (a config or scope the API refuses is refused here); archive and delete too."""

from django.contrib import admin
from django.utils.safestring import SafeString

from registry.core.admin import ArchivableAdmin, ServiceWriteAdmin, changelist_link
from registry.core.views import WriteServices
from registry.environments import services
from registry.environments.models import Environment
from registry.environments.serializers import EnvironmentWriteSerializer


@admin.register(Environment)
class EnvironmentAdmin(ServiceWriteAdmin, ArchivableAdmin):
    list_display = ("id", "name", "workspace", "scope", "created_at", "archived_at")
    list_filter = ("scope", "created_at")
    list_select_related = ("workspace",)
    search_fields = ("id", "name")
    fields = (
        "id",
        "workspace",
        "name",
        "description",
        "config",
        "scope",
        "metadata",
        "sessions",
        "created_at",
        "updated_at",
        "archived_at",
    )
    readonly_fields = ("id", "sessions", "created_at", "updated_at")
    write_serializer = EnvironmentWriteSerializer
    write_services = WriteServices(services.environment_create, services.environment_update, "environment")

    @admin.display(description="sessions")
    def sessions(self, environment: Environment) -> SafeString:
        return changelist_link(
            "agent_sessions.Session", f"{environment.sessions.count()} sessions", environment=environment.pk
        )
