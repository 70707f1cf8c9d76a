"""Reads for triggers: the fires that are due, the sessions still running."""

from __future__ import annotations

from datetime import datetime
from typing import cast

from django.db.models import QuerySet

from registry.sessions.models import Session
from registry.triggers.models import SCHEDULED_STATUSES, Trigger

DUE_BATCH = 100  # triggers fired per scheduler pass; the rest wait for the next pass


def due_fires(*, now: datetime) -> list[tuple[str, datetime]]:
    """(trigger id, fire time) of scheduled triggers due at `now`, the most overdue first."""
    due = Trigger.objects.filter(status__in=SCHEDULED_STATUSES, next_fire_at__lte=now).order_by("next_fire_at", "id")
    # `next_fire_at__lte` has excluded null fire times.
    return cast(list[tuple[str, datetime]], list(due.values_list("id", "next_fire_at")[:DUE_BATCH]))


def running_sessions(*, trigger: Trigger) -> QuerySet[Session]:
    """Sessions the trigger started that are not terminated."""
    return Session.objects.filter(trigger_fires__trigger=trigger).exclude(status=Session.Status.TERMINATED)
