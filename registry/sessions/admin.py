"""Django admin for sessions and their event log (read-only: the log is append-only)."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from registry.core.admin import ReadOnlyInline
from registry.sessions.models import Session, SessionEvent


class SessionEventInline(ReadOnlyInline):
    model = SessionEvent
    fields = ("seq", "type", "processed_at", "body")
    ordering = ("seq",)


@admin.register(Session)
class SessionAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("id", "workspace", "agent", "status", "created_at", "archived_at")
    list_filter = ("status",)
    search_fields = ("id", "title")
    exclude = ("resources",)  # may hold sealed repository tokens
    readonly_fields = (
        "id",
        "workspace",
        "agent",
        "agent_version",
        "agent_snapshot",
        "environment",
        "status",
        "stop_reason",
        "usage",
        "active_seconds",
        "last_seq",
        "created_at",
        "updated_at",
    )
    inlines = [SessionEventInline]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False
