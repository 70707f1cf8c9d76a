"""Django admin for sessions: a page that reads as a transcript of the event log with a timeline of the tool
calls, follows a running session live (it reads `<id>/transcript/` for events after the last `seq` it shows,
woken by the feed of `admin_stream`, which also carries the agent's message as it is written), and offers an
operator the actions of `admin_actions`; a list that finds sessions by agent name, title, metadata and event text.

Nothing secret is rendered: resources lose their sealed tokens (as in the API), media blocks show their
kind only, vault credentials appear as links.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import datetime
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
from registry.core.admin_reading import ReadingStyles, markdown_html, pretty, viewable
from registry.sessions import admin_actions, admin_list, admin_stream, admin_timeline, services
from registry.sessions import admin_work as admin_work  # registers the work items' page
from registry.sessions.events import NATIVE_BETA_FIELD, TOOL_ANSWER_FIELDS, TOOL_CALL_TYPES
from registry.sessions.log import THINKING_FIELD
from registry.sessions.models import Session, SessionEvent
from registry.sessions.selectors import events_after, public_resource, sessions_matching
from registry.vaults.models import Vault

FOLLOW_SECONDS = 2
ENTRIES_TEMPLATE = "admin/agent_sessions/session/transcript_entries.html"
SUMMARY_TEMPLATE = "admin/agent_sessions/session/transcript_summary.html"
ACTIONS_TEMPLATE = "admin/agent_sessions/session/transcript_actions.html"
TIMELINE_TEMPLATE = "admin/agent_sessions/session/transcript_timeline.html"
EVENTS_PER_READ = 500
HIDDEN = ("span.model_request_start", "span.outcome_evaluation_start")  # their `_end` says it all
# Why an `agent.thinking` shows no text, by the kind of block the runtime kept (None: it kept nothing).
THINKING_NOT_SHOWN: dict[str | None, str] = {
    "redacted_thinking": "Thinking not kept by the provider: it returned this thinking encrypted (redacted).",
    "thinking": "Thinking not kept by this model or provider: it returned only a signature, no text.",
    None: "Not recorded: this event was written before the runtime kept the thinking's text.",
}


@dataclass(frozen=True)
class Entry:
    """One event as the transcript shows it; `kind` picks its style (user, agent, thinking, tool,
    result, error, status, usage, note); `event_id` lets the page replace the preview of a message. An agent's
    message also comes as `markdown` (safe HTML); `note` says why a thinking has no text."""

    seq: int
    kind: str
    label: str
    at: datetime | None
    text: str = ""
    detail: str = ""
    is_error: bool = False
    event_id: str = ""
    markdown: str = ""
    note: str = ""


def blocks_text(blocks: Iterable[dict[str, Any]] | None) -> str:
    """The text of content blocks; images and documents appear as their kind, never their data."""
    parts = []
    for block in blocks or ():
        if block.get("type") == "text":
            parts.append(block.get("text", ""))
        elif block.get("type") == "search_result":
            parts.append(f"[search result: {block.get('title') or block.get('source')}]")
        else:
            parts.append(f"[{block.get('type')}{': ' + block['title'] if block.get('title') else ''}]")
    return "\n\n".join(parts)


def usage_text(usage: dict[str, Any]) -> str:
    cache_written = usage.get("cache_creation_input_tokens")
    if cache_written is None:
        cache_written = sum((usage.get("cache_creation") or {}).values())
    return (
        f"input {usage.get('input_tokens', 0)} · output {usage.get('output_tokens', 0)} · "
        f"cache read {usage.get('cache_read_input_tokens', 0)} · cache write {cache_written}"
    )


def _message(event: SessionEvent, calls: dict[str, str]) -> Entry:
    text = blocks_text(event.body.get("content"))
    if event.type.startswith("user."):
        return Entry(event.seq or 0, "user", "User", event.processed_at, text)
    return Entry(event.seq or 0, "agent", "Agent", event.processed_at, text, markdown=markdown_html(text))


def _thinking(event: SessionEvent, calls: dict[str, str]) -> Entry:
    kept = event.body.get(THINKING_FIELD) or {}
    text = kept.get("text") or ""
    note = "" if text else THINKING_NOT_SHOWN.get(kept.get("type"), THINKING_NOT_SHOWN[None])
    return Entry(event.seq or 0, "thinking", "Thinking", event.processed_at, text, note=note)


def _tool_call(event: SessionEvent, calls: dict[str, str]) -> Entry:
    body = event.body
    server = f" on {body['mcp_server_name']}" if body.get("mcp_server_name") else ""
    permission = f"permission: {body['evaluated_permission']}" if body.get("evaluated_permission") else ""
    label = f"Tool call: {body.get('name')}{server}"
    return Entry(event.seq or 0, "tool", label, event.processed_at, permission, pretty(body.get("input") or {}))


def _tool_answer(event: SessionEvent, calls: dict[str, str]) -> Entry:
    body = event.body
    name = calls.get(body.get(TOOL_ANSWER_FIELDS[event.type], ""), "?")
    if event.type == "user.tool_confirmation":
        label = f"Tool confirmation: {body.get('result')} {name}"
        return Entry(event.seq or 0, "user", label, event.processed_at, body.get("deny_message") or "")
    error = bool(body.get("is_error"))
    label = f"Tool result: {name}{' (error)' if error else ''}"
    return Entry(event.seq or 0, "result", label, event.processed_at, blocks_text(body.get("content")), is_error=error)


def _error(event: SessionEvent, calls: dict[str, str]) -> Entry:
    error = event.body.get("error") or {}
    retry = (error.get("retry_status") or {}).get("type")
    text = error.get("message", "") + (f"\n(retry: {retry})" if retry else "")
    return Entry(event.seq or 0, "error", f"Error: {error.get('type')}", event.processed_at, text, is_error=True)


def _status(event: SessionEvent, calls: dict[str, str]) -> Entry:
    stop_reason = event.body.get("stop_reason") or {}
    text = f"stop reason: {stop_reason['type']}" if stop_reason.get("type") else ""
    label = f"Status: {event.type.removeprefix('session.status_')}"
    return Entry(event.seq or 0, "status", label, event.processed_at, text)


def _model_request(event: SessionEvent, calls: dict[str, str]) -> Entry:
    failed = bool(event.body.get("is_error"))
    label = "Model request failed" if failed else "Model request"
    usage = usage_text(event.body.get("model_usage") or {})
    return Entry(event.seq or 0, "usage", label, event.processed_at, usage, is_error=failed)


def _user_note(event: SessionEvent, calls: dict[str, str]) -> Entry:
    label = "Interrupt" if event.type == "user.interrupt" else "Outcome defined"
    return Entry(event.seq or 0, "user", label, event.processed_at, event.body.get("description") or "")


def _session_note(event: SessionEvent, calls: dict[str, str]) -> Entry:
    if event.type == "agent.thread_context_compacted":
        return Entry(event.seq or 0, "status", "Context compacted", event.processed_at)
    body = {key: value for key, value in event.body.items() if key != NATIVE_BETA_FIELD}
    if event.type == "span.outcome_evaluation_end":
        label = f"Outcome evaluation: {body.get('result')}"
        return Entry(event.seq or 0, "status", label, event.processed_at, body.get("explanation") or "")
    return Entry(event.seq or 0, "note", event.type, event.processed_at, detail=pretty(body))


DESCRIBE: dict[str, Callable[[SessionEvent, dict[str, str]], Entry]] = {
    "user.message": _message,
    "agent.message": _message,
    "agent.thinking": _thinking,
    **dict.fromkeys(TOOL_CALL_TYPES, _tool_call),
    **dict.fromkeys(TOOL_ANSWER_FIELDS, _tool_answer),
    "session.error": _error,
    **dict.fromkeys(("idle", "running", "rescheduled", "terminated"), _status),
    "span.model_request_end": _model_request,
    "user.interrupt": _user_note,
    "user.define_outcome": _user_note,
}


def describe(event: SessionEvent, calls: dict[str, str]) -> Entry:
    status = event.type.removeprefix("session.status_") if event.type.startswith("session.status_") else None
    return replace(DESCRIBE.get(status or event.type, _session_note)(event, calls), event_id=event.id)


def tool_names(session_id: str, events: list[SessionEvent]) -> dict[str, str]:
    """The names of the tool calls the answers among `events` refer to (the calls may be in an earlier read)."""
    ids = {event.body.get(TOOL_ANSWER_FIELDS[event.type]) for event in events if event.type in TOOL_ANSWER_FIELDS}
    calls = SessionEvent.objects.filter(session_id=session_id, pk__in=ids - {None}, type__in=TOOL_CALL_TYPES)
    return {call_id: name for call_id, name in calls.values_list("id", "body__name")}


def transcript(session: Session, after_seq: int) -> dict[str, Any]:
    """Entries after `after_seq`, the seq to read after next, and whether more are waiting already."""
    events = events_after(session_id=session.pk, after_seq=after_seq, limit=EVENTS_PER_READ)
    calls = tool_names(session.pk, events)
    entries = [describe(event, calls) for event in events if event.type not in HIDDEN]
    return {
        "entries": entries,
        "event_ids": [entry.event_id for entry in entries],
        "last_seq": events[-1].seq if events else after_seq,
        "more": len(events) == EVENTS_PER_READ,
    }


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
            context["actions"] = admin_actions.panel(request, obj)
        return super().render_change_form(request, context, add, change, form_url, obj)

    def transcript_view(self, request: HttpRequest, object_id: str) -> JsonResponse:
        """Entries after `?after=<seq>` as HTML, with the session's status and totals, its tool-call timeline and
        its live actions: what the page appends or replaces."""
        session = viewable(self, request, unquote(object_id))
        after = request.GET.get("after", "0")
        read = transcript(session, int(after) if after.isdigit() else 0)
        totals = summary(session)
        actions = admin_actions.panel(request, session)
        return JsonResponse(
            {
                "html": render_to_string(ENTRIES_TEMPLATE, {"transcript": read}),
                "summary": render_to_string(SUMMARY_TEMPLATE, {"transcript": totals}),
                "timeline": render_to_string(TIMELINE_TEMPLATE, {"timeline": admin_timeline.timeline(session.pk)}),
                "actions": render_to_string(ACTIONS_TEMPLATE, {"actions": actions}, request=request),
                "actions_key": actions["key"],
                "event_ids": read["event_ids"],
                "last_seq": read["last_seq"],
                "more": read["more"],
                "following": totals["following"],
                "running": totals["running"],
            }
        )
