"""The admin's list of sessions: the status as staff read it ("Requires action": idle, waiting on a tool
confirmation or a custom tool's result), its filter, and the columns for tokens, cost, duration and last activity."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Q, QuerySet
from django.http import HttpRequest
from django.utils import formats, timezone

from registry.sessions.models import Session, SessionThread
from registry.sessions.selectors import duration_seconds

Status = Session.Status
REQUIRES_ACTION = "requires_action"
REQUIRES_ACTION_LABEL = "Requires action"
WAITING_ON_STAFF = Q(status=Status.IDLE, stop_reason__type=REQUIRES_ACTION)


def requires_action(session: Session | SessionThread) -> bool:
    """Idle until someone answers: its turn stopped on calls that need a confirmation or a result."""
    return session.status == Status.IDLE and (session.stop_reason or {}).get("type") == REQUIRES_ACTION


def status_label(session: Session | SessionThread) -> str:
    """The status as staff read it (a thread's too)."""
    return REQUIRES_ACTION_LABEL if requires_action(session) else str(Status(session.status).label)


class StatusFilter(admin.SimpleListFilter):
    """The lifecycle status, with "Requires action" apart from the other idle sessions."""

    title = "status"
    parameter_name = "status__exact"  # the field filter's own parameter: links made before keep working

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [
            (Status.IDLE, "Idle"),
            (REQUIRES_ACTION, REQUIRES_ACTION_LABEL),
            (Status.RUNNING, "Running"),
            (Status.RESCHEDULING, "Rescheduling"),
            (Status.TERMINATED, "Terminated"),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value == REQUIRES_ACTION:
            return queryset.filter(WAITING_ON_STAFF)
        if value == Status.IDLE:
            return queryset.filter(status=Status.IDLE).exclude(pk__in=queryset.filter(WAITING_ON_STAFF).values("pk"))
        if value in Status.values:
            return queryset.filter(status=value)
        return queryset


def seconds_text(seconds: float) -> str:
    """A duration as staff read it: `42 s`, `3 min 05 s`, `2 h 07 min`, `4 d 03 h`."""
    whole = int(seconds)
    minutes, second = divmod(whole, 60)
    hours, minute = divmod(minutes, 60)
    days, hour = divmod(hours, 24)
    if days:
        return f"{days} d {hour:02d} h"
    if hours:
        return f"{hours} h {minute:02d} min"
    if minutes:
        return f"{minutes} min {second:02d} s"
    return f"{whole} s"


@admin.display(description="status", ordering="status")
def status_column(session: Session) -> str:
    return status_label(session)


@admin.display(description="tokens")
def tokens_column(session: Session) -> str:
    usage = session.usage or {}
    return f"{usage.get('input_tokens', 0):,} in · {usage.get('output_tokens', 0):,} out"


@admin.display(description="list cost", ordering="list_cost_usd")
def cost_column(session: Session) -> str:
    return f"{session.list_cost_usd:.4f} USD"


@admin.display(description="duration")
def duration_column(session: Session) -> str:
    return seconds_text(duration_seconds(session))


@admin.display(description="last activity", ordering="updated_at")
def last_activity_column(session: Session) -> str:
    return str(formats.localize(timezone.localtime(session.updated_at)))
