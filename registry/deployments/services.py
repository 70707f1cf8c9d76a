"""Writes for deployments: create, update, archive, pause, unpause and run now; the scheduler's fire of a
due tick; and pausing the deployments of an archived agent or environment. Each change writes its webhook
event into the outbox in its own transaction.

A scheduled fire is claimed by inserting its run row before anything else: a second scheduler's insert
of the same (deployment, scheduled_at) waits for the first transaction and then fails, so it skips.
"""

from __future__ import annotations

import copy
import logging
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from registry.agents.selectors import usable_agent
from registry.core.errors import ApiError, ErrorType, conflict, invalid_request, not_found
from registry.core.fields import merge_metadata
from registry.core.schedule import ScheduleError, next_fire_after
from registry.core.secrets import seal, unseal
from registry.deployments import selectors
from registry.deployments.errors import MANUAL_PAUSE, RunErrorType, RunFailure
from registry.deployments.models import Deployment, DeploymentRun
from registry.environments.selectors import usable_environment
from registry.environments.services import is_self_hosted
from registry.extensions.selectors import list_price
from registry.sessions import resources as session_resources
from registry.sessions.models import Session
from registry.sessions.services import BUDGET_PROVIDER, session_create
from registry.webhooks import outbox
from registry.workspaces.models import Workspace

logger = logging.getLogger(__name__)

Status = Deployment.Status
TriggerType = DeploymentRun.TriggerType
SEALED_TOKEN = "sealed_authorization_token"  # a repository resource's token, kept for the sessions it creates


# -- resources: a repository's token is sealed at rest, never shown ------------------------------------------
def _stored_resources(deployment_id: str, resources: list[dict[str, Any]]) -> list[dict[str, Any]]:
    stored = []
    for resource in resources:
        record = {key: value for key, value in resource.items() if key != "authorization_token"}
        if resource.get("authorization_token"):
            record[SEALED_TOKEN] = seal(resource["authorization_token"], context=deployment_id)
        stored.append(record)
    return stored


def public_resources(deployment: Deployment) -> list[dict[str, Any]]:
    """The resources as the deployment shows them: as given, without the write-only token."""
    return [{key: value for key, value in item.items() if key != SEALED_TOKEN} for item in deployment.resources]


def _session_resources(deployment: Deployment) -> list[dict[str, Any]]:
    """The resources as a session create takes them: the token unsealed."""
    given = []
    for item in deployment.resources:
        resource = {key: value for key, value in item.items() if key != SEALED_TOKEN}
        if item.get(SEALED_TOKEN):
            resource["authorization_token"] = unseal(item[SEALED_TOKEN], context=deployment.pk)
        given.append(resource)
    return given


# -- validation: what a session create (and this deployment's first fire) would refuse ----------------------
def _check_budgetable(spec: dict[str, Any]) -> None:
    model = spec["model"]["id"]
    if list_price(provider=BUDGET_PROVIDER, model=model) is None:
        raise invalid_request(
            f"budget: model_not_budgetable: model {model} has no list price, so no budget can measure it."
        )


def _check(deployment: Deployment, given: set[str], spec: dict[str, Any]) -> None:
    """The checks of the fields `given` (against the values they meet): the same a session create and a
    fire make, a failure answered as a 400 naming the field."""
    workspace_id = deployment.workspace_id
    try:
        if "agent" in given:
            selectors.check_skills(workspace_id=workspace_id, spec=spec)
        if given & {"environment_id", "resources"}:
            environment = selectors.live_environment(
                workspace_id=workspace_id, environment_id=deployment.environment_id
            )
            resources = list(deployment.resources)
            selectors.check_resources(workspace_id=workspace_id, resources=resources, environment=environment)
            # Checkouts and mount paths, as the session's records will be built from them.
            session_resources.build_records(
                deployment.workspace, public_resources(deployment), [], on_worker=is_self_hosted(environment)
            )
        if "vault_ids" in given:
            selectors.check_vaults(workspace_id=workspace_id, vault_ids=list(deployment.vault_ids))
        if "initial_events" in given:
            selectors.check_event_files(workspace_id=workspace_id, events=deployment.initial_events)
    except RunFailure as failure:
        raise failure.as_invalid_request() from None
    if deployment.budget is not None and given & {"agent", "budget"}:
        _check_budgetable(spec)


def _apply(deployment: Deployment, values: dict[str, Any]) -> None:
    """Copy a validated body onto `deployment`: omitted fields keep their value, metadata merges, lists and
    the schedule are replaced whole (null clears what may be cleared), then check what changed."""
    workspace_id = deployment.workspace_id
    if "agent" in values:
        agent, pinned, spec = usable_agent(workspace_id=workspace_id, reference=values["agent"])
        deployment.agent, deployment.agent_version = agent, pinned or agent.version
    else:
        spec = selectors.pinned_spec(agent=deployment.agent, version=deployment.agent_version)
    if "environment_id" in values:
        deployment.environment_id = usable_environment(
            workspace_id=workspace_id, environment_id=values["environment_id"]
        ).pk
    for field in ("name", "initial_events", "budget"):
        if field in values:
            setattr(deployment, field, values[field])
    if "description" in values:
        deployment.description = values["description"] or None
    if "vault_ids" in values:
        deployment.vault_ids = list(values["vault_ids"] or [])
    if "resources" in values:
        deployment.resources = _stored_resources(deployment.pk, list(values["resources"] or []))
    if values.get("metadata") is not None:
        deployment.metadata = merge_metadata(deployment.metadata, values["metadata"])
    if "schedule" in values:
        schedule = values["schedule"] or {}
        deployment.schedule_expression = schedule.get("expression")
        deployment.schedule_timezone = schedule.get("timezone")
    _check(deployment, set(values), spec)


def _next_tick(deployment: Deployment, now: datetime) -> datetime | None:
    """The first tick after `now` of an active, scheduled, live deployment; else (or when the schedule never
    matches again: a body whose schedule never matches is refused) none."""
    expression, zone = deployment.schedule_expression, deployment.schedule_timezone
    if deployment.status != Status.ACTIVE or deployment.archived_at is not None or expression is None or zone is None:
        return None
    try:
        return next_fire_after(expression, zone, now)
    except ScheduleError:
        return None


def _locked(deployment_id: str) -> Deployment | None:
    # NO KEY UPDATE of this row only: run rows' foreign keys take key-share locks on it meanwhile.
    return (
        Deployment.objects.select_for_update(no_key=True, of=("self",))
        .select_related("workspace", "agent")
        .filter(pk=deployment_id)
        .first()
    )


def _lock(deployment: Deployment) -> Deployment:
    locked = _locked(deployment.pk)
    if locked is None:
        raise not_found(f"Deployment {deployment.pk} not found.")
    return locked


def _refuse_archived(deployment: Deployment, action: str) -> None:
    if deployment.archived_at is not None:
        raise conflict(f"Deployment {deployment.pk} is archived and cannot {action}.")


def _emit(event_type: str, deployment: Deployment) -> None:
    outbox.emit(event_type, workspace_id=deployment.workspace_id, object_id=deployment.pk)


# -- create and update -----------------------------------------------------------------------------------
@transaction.atomic
def deployment_create(*, workspace: Workspace, values: dict[str, Any]) -> Deployment:
    deployment = Deployment(workspace=workspace)
    _apply(deployment, values)
    deployment.next_fire_at = _next_tick(deployment, timezone.now())
    deployment.save(force_insert=True)
    _emit("deployment.created", deployment)
    return deployment


@transaction.atomic
def deployment_update(*, deployment: Deployment, values: dict[str, Any]) -> Deployment:
    """A partial update; a change of `schedule` moves the next tick to the first after now."""
    locked = _lock(deployment)
    _refuse_archived(locked, "be updated")
    before = (locked.schedule_expression, locked.schedule_timezone)
    _apply(locked, values)
    if (locked.schedule_expression, locked.schedule_timezone) != before:
        locked.next_fire_at = _next_tick(locked, timezone.now())
    locked.save()
    _emit("deployment.updated", locked)
    return locked


# -- pause, unpause, archive -----------------------------------------------------------------------------
def _pause(deployment: Deployment, reason: dict[str, Any]) -> None:
    """Set the deployment paused for `reason` (the caller saves it) and emit `deployment.paused`."""
    deployment.status = Status.PAUSED
    deployment.paused_reason = reason
    deployment.next_fire_at = None
    _emit("deployment.paused", deployment)


PAUSE_FIELDS = ["status", "paused_reason", "next_fire_at", "updated_at"]


@transaction.atomic
def deployment_pause(*, deployment: Deployment) -> Deployment:
    """Pause (reason `manual`); pausing a paused deployment changes nothing, whatever paused it."""
    locked = _lock(deployment)
    _refuse_archived(locked, "be paused")
    if locked.status == Status.ACTIVE:
        _pause(locked, dict(MANUAL_PAUSE))
        locked.save(update_fields=PAUSE_FIELDS)
    return locked


@transaction.atomic
def deployment_unpause(*, deployment: Deployment) -> Deployment:
    """Active again, the reason cleared, the next tick the first after now (missed ticks are not fired)."""
    locked = _lock(deployment)
    _refuse_archived(locked, "be unpaused")
    if locked.status == Status.PAUSED:
        locked.status, locked.paused_reason = Status.ACTIVE, None
        locked.next_fire_at = _next_tick(locked, timezone.now())
        locked.save(update_fields=PAUSE_FIELDS)
        _emit("deployment.unpaused", locked)
    return locked


@transaction.atomic
def deployment_archive(*, deployment: Deployment) -> Deployment:
    """Final: no fire, no change after it. An archived deployment reports `active`, with `archived_at`."""
    locked = _lock(deployment)
    if locked.archived_at is None:
        locked.archived_at = timezone.now()
        locked.status, locked.paused_reason, locked.next_fire_at = Status.ACTIVE, None, None
        locked.save(update_fields=["archived_at", *PAUSE_FIELDS])
        _emit("deployment.archived", locked)
    return locked


@transaction.atomic
def deployments_pause_for_archive(
    *, workspace_id: str, agent_id: str | None = None, environment_id: str | None = None
) -> int:
    """Pause every live, active deployment of the workspace that uses the archived agent (reason
    `agent_archived_error`) or environment (`environment_archived_error`); how many were paused. The agent
    and environment archive services call it in their own transaction."""
    if agent_id is None and environment_id is None:
        return 0
    uses = Q(agent_id=agent_id) if agent_id is not None else Q()
    if environment_id is not None:
        uses |= Q(environment_id=environment_id)
    affected = (
        Deployment.objects.select_for_update(no_key=True)
        .filter(uses, workspace_id=workspace_id, status=Status.ACTIVE, archived_at__isnull=True)
        .order_by("pk")
    )
    paused = 0
    for deployment in affected:
        cause = RunErrorType.AGENT_ARCHIVED if deployment.agent_id == agent_id else RunErrorType.ENVIRONMENT_ARCHIVED
        _pause(deployment, RunFailure(cause, "").paused_reason())
        deployment.save(update_fields=PAUSE_FIELDS)
        paused += 1
    return paused


# -- firing ----------------------------------------------------------------------------------------------
def _session_values(deployment: Deployment) -> dict[str, Any]:
    values: dict[str, Any] = {
        "agent": {"type": "agent", "id": deployment.agent_id, "version": deployment.agent_version},
        "environment_id": deployment.environment_id,
        "title": deployment.name,
        "vault_ids": list(deployment.vault_ids),
        "resources": _session_resources(deployment),
        "initial_events": copy.deepcopy(deployment.initial_events),
    }
    if deployment.budget is not None:
        values["budget"] = copy.deepcopy(deployment.budget)
    return values


def _refusal(error: ApiError) -> RunFailure:
    """A session create's refusal that no check of the fire foresaw."""
    if error.error_type == ErrorType.RATE_LIMIT:
        return RunFailure(RunErrorType.SESSION_RATE_LIMITED, error.message)
    return RunFailure(RunErrorType.SESSION_CREATION_REJECTED, error.message)


def _create_session(deployment: Deployment) -> Session | RunFailure:
    """The fire's session, or why there is none. Everything happens in a savepoint, so a failure leaves
    the fire's transaction whole to record it."""
    try:
        with transaction.atomic():
            selectors.check_fire(deployment)
            return session_create(workspace=deployment.workspace, values=_session_values(deployment))
    except RunFailure as failure:
        return failure
    except ApiError as error:
        return _refusal(error)
    except Exception:  # recorded as the run's error (and the deployment pauses) instead of retried forever
        logger.exception("deployment %s: the session could not be created", deployment.pk)
        return RunFailure(RunErrorType.UNKNOWN, "The session could not be created: an unexpected error occurred.")


def _new_run(deployment: Deployment, trigger_type: str, scheduled_at: datetime | None = None) -> DeploymentRun:
    return DeploymentRun.objects.create(
        workspace_id=deployment.workspace_id,
        deployment_id=deployment.pk,
        agent_id=deployment.agent_id,
        agent_version=deployment.agent_version,
        trigger_type=trigger_type,
        scheduled_at=scheduled_at,
    )


def _fire(deployment: Deployment, run: DeploymentRun, fields: list[str]) -> None:
    """Create the run's session and record the outcome on the run (and, when the failure pauses it, on the
    deployment); save both. `fields`: the deployment's fields the caller changed."""
    outbox.emit("deployment_run.started", workspace_id=run.workspace_id, object_id=run.pk)
    outcome = _create_session(deployment)
    if isinstance(outcome, RunFailure):
        run.error = outcome.run_error()
        outbox.emit("deployment_run.failed", workspace_id=run.workspace_id, object_id=run.pk)
        if outcome.pauses and deployment.status == Status.ACTIVE:
            _pause(deployment, outcome.paused_reason())
            fields = [*fields, *PAUSE_FIELDS]
        logger.info("deployment %s run %s failed: %s", deployment.pk, run.pk, outcome.error_type)
    else:
        run.session_id = outcome.pk
        outbox.emit("deployment_run.succeeded", workspace_id=run.workspace_id, object_id=run.pk)
    run.save(update_fields=["agent_id", "agent_version", "session_id", "error"])
    if fields:
        deployment.save(update_fields=sorted(set(fields)))


@transaction.atomic
def deployment_run(*, deployment: Deployment) -> DeploymentRun:
    """Fire once now, outside the schedule (a paused deployment too; not an archived one): the next tick is
    unchanged."""
    locked = _lock(deployment)
    _refuse_archived(locked, "run")
    run = _new_run(locked, TriggerType.MANUAL)
    _fire(locked, run, [])
    return run


def _claim(deployment_id: str, scheduled_at: datetime) -> DeploymentRun | None:
    """Insert the tick's run row; None when another scheduler holds it already (or the deployment is gone)."""
    snapshot = Deployment.objects.filter(pk=deployment_id).values("workspace_id", "agent_id", "agent_version").first()
    if snapshot is None:
        return None
    try:
        with transaction.atomic():
            return DeploymentRun.objects.create(
                deployment_id=deployment_id, trigger_type=TriggerType.SCHEDULE, scheduled_at=scheduled_at, **snapshot
            )
    except IntegrityError:
        return None


@transaction.atomic
def deployment_fire_due(*, deployment_id: str, scheduled_at: datetime, now: datetime) -> DeploymentRun | None:
    """The scheduler's fire of `deployment_id` for its due tick `scheduled_at`; None when it is not ours.

    The next tick becomes the first after `now`, so a deployment that missed several ticks (the scheduler
    was down) fires once for the whole missed window.
    """
    run = _claim(deployment_id, scheduled_at)
    if run is None:
        return None
    deployment = _locked(deployment_id)
    due = (
        deployment is not None
        and deployment.status == Status.ACTIVE
        and deployment.archived_at is None
        and deployment.next_fire_at == scheduled_at
    )
    if not due:
        # Paused, archived, rescheduled or deleted since it was found due: give the claim back.
        transaction.set_rollback(True)
        return None
    assert deployment is not None
    run.agent_id, run.agent_version = deployment.agent_id, deployment.agent_version
    deployment.next_fire_at = _next_tick(deployment, now)
    deployment.last_run_at = now
    _fire(deployment, run, ["next_fire_at", "last_run_at"])
    return run
