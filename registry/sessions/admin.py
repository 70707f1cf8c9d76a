"""Django admin for sessions: a page that reads as a transcript of the event log (`admin_transcript`) with a
timeline of the tool calls and the tree of the session's threads, each child with its own transcript
(`admin_threads`), follows a running session live (it reads `<id>/transcript/` for events after the last `seq` it
shows of each log, woken by the feed of `admin_stream`, which also carries the agent's message as it is written),
and offers an operator the actions of `admin_actions`; a list that finds sessions by agent name, title, metadata
and event text.

Nothing secret is rendered: resources lose their sealed tokens (as in the API), media blocks show their
kind only, vault credentials appear as links.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import quote, unquote
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from registry.agents.models import AgentVersion
from registry.core.admin import ArchivableAdmin, ReadOnlyAdmin, change_link
from registry.core.admin_reading import ReadingStyles, pretty, viewable
from registry.sessions import admin_actions, admin_list, admin_stream, admin_threads, admin_timeline, services
from registry.sessions import admin_work as admin_work  # registers the work items' page
from registry.sessions.admin_transcript import transcript, usage_text
from registry.sessions.models import Session
from registry.sessions.selectors import public_resource, sessions_matching
from registry.vaults.models import Vault

FOLLOW_SECONDS = 2
ENTRIES_TEMPLATE = "admin/agent_sessions/session/transcript_entries.html"
SUMMARY_TEMPLATE = "admin/agent_sessions/session/transcript_summary.html"
ACTIONS_TEMPLATE = "admin/agent_sessions/session/transcript_actions.html"
TIMELINE_TEMPLATE = "admin/agent_sessions/session/transcript_timeline.html"


def summary(session: Session) -> dict[str, Any]:
    return {
        "status": session.status,
        "status_label": admin_list.status_label(session),
        "running": session.status in admin_actions.INTERRUPTIBLE,
        "usage": usage_text(session.usage),
        "list_cost_usd": session.list_cost_usd,
        "active_seconds": round(session.active_seconds, 1),
        "following": session.status != Session.Status.TERMINATED,
    }


@admin.register(Session)
class SessionAdmin(ReadingStyles, ArchivableAdmin, ReadOnlyAdmin):
    """Sessions change through the API and the runtime: no field is edited here; an operator acts on a session
    through the services, as the API does (`admin_actions`)."""

    list_display = (
        "id",
        "title",
        "workspace",
        "agent",
        admin_list.status_column,
        admin_list.tokens_column,
        admin_list.cost_column,
        admin_list.duration_column,
        admin_list.last_activity_column,
        "created_at",
        "archived_at",
    )
    list_filter = (
        admin_list.StatusFilter,
        ("agent", admin.RelatedOnlyFieldListFilter),
        "created_at",
    )
    list_select_related = ("workspace", "agent")
    ordering = ("-created_at", "-id")
    search_fields = ("id", "title", "agent__name", "metadata")  # what `get_search_results` searches, and events
    search_help_text = "Finds sessions by id, title, agent name, metadata, or the text of their events."
    fields = (
        "id",
        "title",
        "workspace",
        "agent",
        "version",
        "environment",
        "vaults",
        "status",
        "stop_reason",
        "metadata",
        "public_resources",
        "created_at",
        "updated_at",
        "archived_at",
    )
    readonly_fields = fields
    change_form_template = "admin/agent_sessions/session/change_form.html"
    archive_permission = "act"  # an operator archives (terminates) a session; deleting one takes an admin

    def archive_one(self, obj: Session) -> None:
        services.session_archive(session=obj)

    def delete_model(self, request: HttpRequest, obj: Session) -> None:
        services.session_delete(session=obj)  # as the API's delete: the runtime stops its sandbox, drops its files

    @admin.display(description="agent version")
    def version(self, session: Session) -> SafeString | str:
        found = AgentVersion.objects.filter(agent_id=session.agent_id, version=session.agent_version).first()
        return change_link(AgentVersion, found.pk, str(found)) if found else str(session.agent_version)

    @admin.display(description="vaults")
    def vaults(self, session: Session) -> SafeString:
        return format_html_join(", ", "{}", ((change_link(Vault, pk, pk),) for pk in session.vault_ids))

    @admin.display(description="resources")
    def public_resources(self, session: Session) -> SafeString | str:
        if not session.resources:
            return "-"
        return format_html("<pre>{}</pre>", pretty([public_resource(resource) for resource in session.resources]))

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Session], search_term: str
    ) -> tuple[QuerySet[Session], bool]:
        return sessions_matching(queryset, search_term), False

    def get_urls(self) -> list[URLPattern]:
        transcript_view = self.admin_site.admin_view(self.transcript_view)
        own = [path("<path:object_id>/transcript/", transcript_view, name="agent_sessions_session_transcript")]
        return own + admin_actions.action_urls(self) + super().get_urls()

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: Session | None = None,
    ) -> HttpResponse:
        if obj is not None:
            context["transcript"] = {
                **transcript(obj, 0),
                **summary(obj),
                "url": reverse("admin:agent_sessions_session_transcript", args=[quote(obj.pk)]),
                "feed_url": admin_stream.feed_url(obj),
                "follow_ms": FOLLOW_SECONDS * 1000,
            }
            context["timeline"] = admin_timeline.timeline(obj.pk)
            context["threads"] = admin_threads.tree(obj)
            context["actions"] = admin_actions.panel(request, obj)
        return super().render_change_form(request, context, add, change, form_url, obj)

    def transcript_view(self, request: HttpRequest, object_id: str) -> JsonResponse:
        """Entries after `?after=<seq>` as HTML, with the session's status and totals, its tool-call timeline, its
        live actions and its threads (each child's entries after `?thread=<id>:<seq>`): what the page appends or
        replaces."""
        session = viewable(self, request, unquote(object_id))
        after = request.GET.get("after", "0")
        read = transcript(session, int(after) if after.isdigit() else 0)
        totals = summary(session)
        actions = admin_actions.panel(request, session)
        threads = admin_threads.live(session, admin_threads.parse_known(request.GET.getlist("thread")))
        return JsonResponse(
            {
                "html": render_to_string(ENTRIES_TEMPLATE, {"transcript": read}),
                "summary": render_to_string(SUMMARY_TEMPLATE, {"transcript": totals}),
                "timeline": render_to_string(TIMELINE_TEMPLATE, {"timeline": admin_timeline.timeline(session.pk)}),
                "actions": render_to_string(ACTIONS_TEMPLATE, {"actions": actions}, request=request),
                "actions_key": actions["key"],
                "event_ids": read["event_ids"],
                "threads": threads,
                "last_seq": read["last_seq"],
                "more": read["more"] or any(thread["more"] for thread in threads),
                "following": totals["following"],
                "running": totals["running"],
            }
        )
