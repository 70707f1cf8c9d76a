"""Writes for triggers: create, update, the actions, and firing (by the scheduler or `start`).

A fire is claimed by inserting its TriggerFire row before anything else; a second scheduler's
insert of the same (trigger, fire_at) waits for the first transaction and then fails, so it skips.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone
from rest_framework import serializers

from registry.agents.selectors import usable_agent
from registry.core.errors import ApiError, conflict, not_found
from registry.core.fields import merge_metadata
from registry.core.schedule import ScheduleError, next_fire_after
from registry.core.selectors import require_live
from registry.environments.selectors import usable_environment
from registry.sessions.services import session_archive, session_create
from registry.triggers import selectors
from registry.triggers.models import SCHEDULED_STATUSES, Trigger, TriggerFire
from registry.triggers.titles import render_title
from registry.vaults.models import Vault
from registry.workspaces.models import Workspace

Status = Trigger.Status


# -- validation against the workspace -------------------------------------------------------------
def _usable_vault_ids(workspace: Workspace, vault_ids: list[str]) -> list[str]:
    require_live(Vault, workspace=workspace, ids=vault_ids, field="session.vault_ids", noun="vault")
    return list(vault_ids)


# -- applying a body ------------------------------------------------------------------------------
def _apply(trigger: Trigger, values: dict[str, Any]) -> None:
    """Copy a validated body onto `trigger`: omitted fields keep their value, metadata merges."""
    if "name" in values:
        trigger.name = values["name"]
    if "agent" in values:
        trigger.agent, trigger.agent_version, _ = usable_agent(
            workspace_id=trigger.workspace_id, reference=values["agent"]
        )
    if "session_mode" in values:
        trigger.session_mode = values["session_mode"]
    if "replicas" in values:
        trigger.replicas = values["replicas"]
    source = values.get("source", {})
    for field in ("schedule", "timezone", "payload"):
        if field in source:
            setattr(trigger, field, source[field])
    template = values.get("session", {})
    if "environment_id" in template:
        trigger.environment_id = usable_environment(
            workspace_id=trigger.workspace_id, environment_id=template["environment_id"], field="session.environment_id"
        ).pk
    if "title_template" in template:
        trigger.title_template = template["title_template"]
    if "metadata" in template:
        trigger.metadata = merge_metadata(trigger.metadata, template["metadata"])
    if "vault_ids" in template:
        trigger.vault_ids = _usable_vault_ids(trigger.workspace, template["vault_ids"])


def _reschedule(trigger: Trigger, now: datetime) -> None:
    """`next_fire_at`: the first tick after `now` while the trigger is scheduled, else none."""
    if trigger.status not in SCHEDULED_STATUSES:
        trigger.next_fire_at = None
        return
    try:
        trigger.next_fire_at = next_fire_after(trigger.schedule, trigger.timezone, now)
    except ScheduleError as error:
        raise serializers.ValidationError({"source": {"schedule": [str(error)]}}) from error


def _locked(trigger_id: str) -> Trigger | None:
    # NO KEY UPDATE: does not wait for the key-share locks that fire rows' foreign keys take.
    return (
        Trigger.objects.select_for_update(no_key=True)
        .select_related("workspace", "agent")
        .filter(pk=trigger_id)
        .first()
    )


def _lock(trigger: Trigger) -> Trigger:
    """`trigger` read again under a row lock (a concurrent delete makes it a 404)."""
    locked = _locked(trigger.pk)
    if locked is None:
        raise not_found(f"Trigger {trigger.pk} not found.")
    return locked


def _refuse_archived(trigger: Trigger, action: str) -> None:
    if trigger.status == Status.ARCHIVED:
        raise conflict(f"Trigger {trigger.id} is archived and cannot {action}.")


# -- create and update ----------------------------------------------------------------------------
@transaction.atomic
def trigger_create(*, workspace: Workspace, values: dict[str, Any]) -> Trigger:
    trigger = Trigger(workspace=workspace)
    _apply(trigger, values)
    _reschedule(trigger, timezone.now())
    trigger.save(force_insert=True)
    return trigger


@transaction.atomic
def trigger_update(*, trigger: Trigger, values: dict[str, Any]) -> Trigger:
    """A partial update; a change of `source` recomputes `next_fire_at` from now."""
    locked = _lock(trigger)
    before = (locked.schedule, locked.timezone)
    _apply(locked, values)
    if (locked.schedule, locked.timezone) != before:
        _reschedule(locked, timezone.now())
    locked.save()
    return locked


# -- actions --------------------------------------------------------------------------------------
def _set_status(trigger: Trigger, status: str, *, now: datetime) -> Trigger:
    trigger.status = status
    _reschedule(trigger, now)
    trigger.save(update_fields=["status", "next_fire_at", "updated_at"])
    return trigger


@transaction.atomic
def trigger_pause(*, trigger: Trigger) -> Trigger:
    locked = _lock(trigger)
    _refuse_archived(locked, "be paused")
    return _set_status(locked, Status.PAUSED, now=timezone.now())


@transaction.atomic
def trigger_unpause(*, trigger: Trigger) -> Trigger:
    """A paused (or failing) trigger becomes active, next firing at the first tick after now."""
    locked = _lock(trigger)
    _refuse_archived(locked, "be unpaused")
    if locked.status == Status.ACTIVE:
        return locked
    return _set_status(locked, Status.ACTIVE, now=timezone.now())


@transaction.atomic
def trigger_archive(*, trigger: Trigger) -> Trigger:
    locked = _lock(trigger)
    if locked.archived_at is None:
        locked.archived_at = timezone.now()
        locked.status = Status.ARCHIVED
        locked.next_fire_at = None
        locked.save(update_fields=["archived_at", "status", "next_fire_at", "updated_at"])
    return locked


@transaction.atomic
def trigger_stop(*, trigger: Trigger) -> Trigger:
    """Terminate (archive) every session the trigger started that is not terminated yet."""
    for session in selectors.running_sessions(trigger=trigger):
        session_archive(session=session)
    return trigger


@transaction.atomic
def trigger_start(*, trigger: Trigger, now: datetime | None = None) -> Trigger:
    """Fire once now, outside the schedule: `next_fire_at` is unchanged."""
    now = now or timezone.now()
    fire = _claim(trigger.pk, now)
    if fire is None:
        raise conflict(f"Trigger {trigger.id} already fired at {now.isoformat()}.")
    locked = _lock(trigger)
    _refuse_archived(locked, "start")
    _fire(locked, fire, now=now)
    return locked


@transaction.atomic
def trigger_restart(*, trigger: Trigger, now: datetime | None = None) -> Trigger:
    return trigger_start(trigger=trigger_stop(trigger=trigger), now=now)


# -- firing ---------------------------------------------------------------------------------------
def _claim(trigger_id: str, fire_at: datetime) -> TriggerFire | None:
    """Insert the fire's row; None when another scheduler (or request) holds it already."""
    try:
        with transaction.atomic():
            return TriggerFire.objects.create(trigger_id=trigger_id, fire_at=fire_at)
    except IntegrityError:
        return None


def _session_values(trigger: Trigger, fired_at: datetime) -> dict[str, Any]:
    return {
        "agent": {"id": trigger.agent_id, "version": trigger.agent_version},
        "environment_id": trigger.environment_id,
        "title": render_title(trigger.title_template, trigger_name=trigger.name, fired_at=fired_at),
        "metadata": dict(trigger.metadata),
        "vault_ids": list(trigger.vault_ids),
        "initial_events": [{"type": "user.message", "content": [{"type": "text", "text": trigger.payload}]}],
    }


def _fire(trigger: Trigger, fire: TriggerFire, *, now: datetime) -> None:
    """Start the fire's session and record the outcome on the fire and the trigger (saved).

    Success clears `error` (and an `error` status becomes `active`); a failure sets `error`, and an
    active trigger becomes `error`. A paused trigger stays paused either way.
    """
    try:
        fire.session = session_create(workspace=trigger.workspace, values=_session_values(trigger, fire.fire_at))
    except ApiError as failure:
        fire.error = trigger.error = failure.message
        if trigger.status == Status.ACTIVE:
            trigger.status = Status.ERROR
    else:
        trigger.last_fired_at, trigger.error = now, None
        if trigger.status == Status.ERROR:
            trigger.status = Status.ACTIVE
    fire.save(update_fields=["session", "error"])
    trigger.save(update_fields=["status", "error", "last_fired_at", "next_fire_at", "updated_at"])


@transaction.atomic
def trigger_fire_due(*, trigger_id: str, fire_at: datetime, now: datetime) -> TriggerFire | None:
    """The scheduler's fire of `trigger_id` at its due `fire_at`; None when it is not ours to fire.

    `next_fire_at` moves to the first tick after `now`, so a trigger that missed several ticks
    (the scheduler was down) fires once for the whole missed window.
    """
    fire = _claim(trigger_id, fire_at)
    if fire is None:
        return None
    trigger = _locked(trigger_id)
    if trigger is None or trigger.status not in SCHEDULED_STATUSES or trigger.next_fire_at != fire_at:
        # Paused, archived, rescheduled or deleted since it was found due: give the claim back.
        transaction.set_rollback(True)
        return None
    _reschedule(trigger, now)
    _fire(trigger, fire, now=now)
    return fire
