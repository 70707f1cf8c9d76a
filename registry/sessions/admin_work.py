"""Django admin for the self-hosted work queue (issue 26): each work item with its state, worker, lease and
session, filtered by state and environment, and a confirmed action that stops items (forced, as the API's
`stop` with `force`: the worker's next heartbeat reads `stopped`). Items enter and change only through the
queue; staff read them here."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.utils.safestring import SafeString

from registry.core.admin import ReadOnlyAdmin, change_link
from registry.sessions import work
from registry.sessions.models import Session, WorkItem


@admin.register(WorkItem)
class WorkItemAdmin(ReadOnlyAdmin):
    deletable = False
    list_display = (
        "id",
        "state",
        "session",
        "environment",
        "worker_id",
        "created_at",
        "latest_heartbeat_at",
        "lease_expires_at",
        "stopped_at",
    )
    list_filter = ("state", "created_at")
    list_select_related = ("environment",)
    search_fields = ("id", "session_ref", "worker_id", "environment__id", "environment__name")
    fields = (
        "id",
        "workspace",
        "environment",
        "session",
        "state",
        "worker_id",
        "metadata",
        "created_at",
        "polled_at",
        "acknowledged_at",
        "started_at",
        "latest_heartbeat_at",
        "lease_expires_at",
        "ttl_seconds",
        "stop_requested_at",
        "stopped_at",
    )
    readonly_fields = fields
    actions = ["stop"]

    @admin.display(description="session")
    def session(self, item: WorkItem) -> SafeString:
        return change_link(Session, item.session_ref, item.session_ref)

    def has_stop_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.permits(request, "act", obj)  # an operator's, as acting on sessions

    @admin.action(description="Stop selected work items (forced)", permissions=["stop"])
    def stop(self, request: HttpRequest, queryset: Any) -> HttpResponse | None:
        live = queryset.exclude(state=WorkItem.State.STOPPED)
        return self.confirmed(
            request,
            live,
            action="stop",
            verb="Stop",
            done="Stopped",
            perform=lambda item: work.work_stop(item=item, force=True),
        )
