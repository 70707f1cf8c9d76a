"""Reads for triggers: the rendered trigger object, the fires that are due, the sessions still running."""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

from django.db.models import QuerySet

from registry.core.serialization import timestamp
from registry.sessions.models import Session
from registry.triggers.models import SCHEDULED_STATUSES, Trigger

DUE_BATCH = 100  # triggers fired per scheduler pass; the rest wait for the next pass


def render_trigger(trigger: Trigger) -> dict[str, Any]:
    return {
        "id": trigger.id,
        "type": "trigger",
        "name": trigger.name,
        "agent": {"type": "agent", "id": trigger.agent_id, "version": trigger.agent_version or trigger.agent.version},
        "session_mode": trigger.session_mode,
        "source": {
            "type": "cron",
            "schedule": trigger.schedule,
            "timezone": trigger.timezone,
            "payload": trigger.payload,
        },
        "session": {
            "environment_id": trigger.environment_id,
            "title_template": trigger.title_template,
            "metadata": trigger.metadata,
            "vault_ids": trigger.vault_ids,
        },
        "replicas": trigger.replicas,
        "status": trigger.status,
        "next_fire_at": timestamp(trigger.next_fire_at),
        "last_fired_at": timestamp(trigger.last_fired_at),
        "error": trigger.error,
        "archived_at": timestamp(trigger.archived_at),
        "created_at": timestamp(trigger.created_at),
        "updated_at": timestamp(trigger.updated_at),
    }


def due_fires(*, now: datetime) -> list[tuple[str, datetime]]:
    """(trigger id, fire time) of scheduled triggers due at `now`, the most overdue first."""
    due = Trigger.objects.filter(status__in=SCHEDULED_STATUSES, next_fire_at__lte=now).order_by("next_fire_at", "id")
    # `next_fire_at__lte` has excluded null fire times.
    return cast(list[tuple[str, datetime]], list(due.values_list("id", "next_fire_at")[:DUE_BATCH]))


def running_sessions(*, trigger: Trigger) -> QuerySet[Session]:
    """Sessions the trigger started that are not terminated."""
    return Session.objects.filter(trigger_fires__trigger=trigger).exclude(status=Session.Status.TERMINATED)
