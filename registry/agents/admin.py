"""Django admin for agents and their versions (read-only history), each linked to its sessions: every spec
pretty-printed, each version compared with its predecessor, and an agent's page with the diffs of its latest
versions."""

from __future__ import annotations

from django.contrib import admin
from django.utils.html import format_html_join
from django.utils.safestring import SafeString

from registry.agents import services
from registry.agents.models import Agent, AgentVersion
from registry.core.admin import ArchivableAdmin, ReadOnlyAdmin, ReadOnlyInline, change_link, changelist_link
from registry.core.admin_reading import ReadingStyles, json_diff, pretty_json

DIFFS_SHOWN = 20  # the agent's page compares its latest versions; older ones are on each version's page


def version_sessions(version: AgentVersion) -> SafeString:
    return changelist_link("agent_sessions.Session", "sessions", agent=version.agent_id, agent_version=version.version)


def diff_with(before: AgentVersion | None, after: AgentVersion) -> SafeString | str:
    """The change `after` made to `before`'s spec (as a unified diff of their pretty JSON)."""
    if before is None:
        return "The first version: nothing to compare with."
    return json_diff(
        before.spec, after.spec, before_label=f"version {before.version}", after_label=f"version {after.version}"
    )


def predecessor(version: AgentVersion) -> AgentVersion | None:
    earlier = AgentVersion.objects.filter(agent_id=version.agent_id, version__lt=version.version)
    return earlier.order_by("-version").first()


class AgentVersionInline(ReadOnlyInline):
    model = AgentVersion
    fields = ("version", "created_at", "sessions", "compare")
    ordering = ("-version",)
    show_change_link = True

    @admin.display(description="sessions")
    def sessions(self, version: AgentVersion) -> SafeString:
        return version_sessions(version)

    @admin.display(description="changes")
    def compare(self, version: AgentVersion) -> SafeString | str:
        return change_link(AgentVersion, version.pk, "compare with the previous version") if version.version > 1 else ""


@admin.register(Agent)
class AgentAdmin(ReadingStyles, ArchivableAdmin, ReadOnlyAdmin):
    """Agents change only through the API (every change is a version); staff read them and archive them. The
    API deletes no agent, nor does this page."""

    list_display = ("id", "name", "workspace", "version", "created_at", "archived_at")
    list_filter = ("created_at",)
    list_select_related = ("workspace",)
    search_fields = ("id", "name")
    fields = (
        "id",
        "workspace",
        "name",
        "version",
        "sessions",
        "current_spec",
        "history",
        "created_at",
        "updated_at",
        "archived_at",
    )
    readonly_fields = fields
    inlines = [AgentVersionInline]
    deletable = False

    def archive_one(self, obj: Agent) -> None:
        services.agent_archive(agent=obj)  # as the API's archive: its deployments pause, its webhook event

    @admin.display(description="sessions")
    def sessions(self, agent: Agent) -> SafeString:
        return changelist_link("agent_sessions.Session", f"{agent.sessions.count()} sessions", agent=agent.pk)

    @admin.display(description="spec")
    def current_spec(self, agent: Agent) -> SafeString:
        return pretty_json(agent.spec)

    @admin.display(description="changes between versions")
    def history(self, agent: Agent) -> SafeString | str:
        """Each of the latest versions against the one before it, newest first."""
        newest = list(AgentVersion.objects.filter(agent=agent).order_by("-version")[: DIFFS_SHOWN + 1])
        pairs = list(zip(newest[1:], newest, strict=False))
        if not pairs:
            return "Only one version."
        return format_html_join("", "{}", ((diff_with(before, after),) for before, after in pairs))


@admin.register(AgentVersion)
class AgentVersionAdmin(ReadingStyles, ReadOnlyAdmin):
    """One immutable definition of an agent, with the sessions that run it and what it changed."""

    workspace_path = "agent__workspace"
    list_display = ("__str__", "agent", "version", "created_at")
    list_select_related = ("agent",)
    search_fields = ("agent__id", "agent__name")
    fields = ("agent", "version", "sessions", "created_at", "version_spec", "changes")
    readonly_fields = fields
    deletable = False

    @admin.display(description="sessions")
    def sessions(self, version: AgentVersion) -> SafeString:
        return version_sessions(version)

    @admin.display(description="spec")
    def version_spec(self, version: AgentVersion) -> SafeString:
        return pretty_json(version.spec)

    @admin.display(description="changes from the previous version")
    def changes(self, version: AgentVersion) -> SafeString | str:
        return diff_with(predecessor(version), version)
