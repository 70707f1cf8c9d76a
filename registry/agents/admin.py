"""Django admin for agents and their versions (read-only history), each linked to its sessions."""

from __future__ import annotations

from django.contrib import admin
from django.utils.safestring import SafeString

from registry.agents.models import Agent, AgentVersion
from registry.core.admin import ArchivableAdmin, ReadOnlyAdmin, ReadOnlyInline, changelist_link


def version_sessions(version: AgentVersion) -> SafeString:
    return changelist_link("agent_sessions.Session", "sessions", agent=version.agent_id, agent_version=version.version)


class AgentVersionInline(ReadOnlyInline):
    model = AgentVersion
    fields = ("version", "created_at", "sessions")
    ordering = ("-version",)
    show_change_link = True

    @admin.display(description="sessions")
    def sessions(self, version: AgentVersion) -> SafeString:
        return version_sessions(version)


@admin.register(Agent)
class AgentAdmin(ArchivableAdmin, ReadOnlyAdmin):
    """Agents change only through the API (every change is a version); staff read them and archive them. The
    API deletes no agent, nor does this page."""

    list_display = ("id", "name", "workspace", "version", "created_at", "archived_at")
    list_filter = ("created_at",)
    list_select_related = ("workspace",)
    search_fields = ("id", "name")
    fields = ("id", "workspace", "name", "version", "sessions", "spec", "created_at", "updated_at", "archived_at")
    readonly_fields = fields
    inlines = [AgentVersionInline]
    deletable = False

    @admin.display(description="sessions")
    def sessions(self, agent: Agent) -> SafeString:
        return changelist_link("agent_sessions.Session", f"{agent.sessions.count()} sessions", agent=agent.pk)


@admin.register(AgentVersion)
class AgentVersionAdmin(ReadOnlyAdmin):
    """One immutable definition of an agent, with the sessions that run it."""

    workspace_path = "agent__workspace"
    list_display = ("__str__", "agent", "version", "created_at")
    list_select_related = ("agent",)
    search_fields = ("agent__id", "agent__name")
    fields = ("agent", "version", "sessions", "created_at", "spec")
    readonly_fields = fields
    deletable = False

    @admin.display(description="sessions")
    def sessions(self, version: AgentVersion) -> SafeString:
        return version_sessions(version)
