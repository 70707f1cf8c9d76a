"""Validation of deployment bodies, and the deployment and deployment run objects (described and rendered by
`DeploymentSerializer` and `DeploymentRunSerializer`), in the reference client's shapes."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from django.utils import timezone
from rest_framework import serializers

from registry.core.fields import MetadataField, StrictCharField, StrictSerializer, TaggedUnionField
from registry.core.schedule import ScheduleError, check_schedule, check_timezone, next_fire_after
from registry.core.serialization import (
    ArchivableObjectSerializer,
    ConstantField,
    CreatedObjectSerializer,
    MetadataMapField,
    timestamp,
)
from registry.deployments import selectors
from registry.deployments.models import Deployment, DeploymentRun
from registry.deployments.services import public_resources
from registry.sessions.events import INITIAL_EVENT_SERIALIZERS
from registry.sessions.serializers import RESOURCE_KINDS, AgentReferenceField, BudgetSerializer

ENVIRONMENT_ID = r"^env_[A-Za-z0-9_-]+$"
VAULT_ID = r"^vlt_[A-Za-z0-9_-]+$"
INITIAL_EVENTS_MAX = 50
RESOURCES_MAX = 500
VAULTS_MAX = 50
DESCRIPTION_MAX = 4096

# -- schedule: five POSIX cron fields, read in an IANA timezone ---------------------------------------------
NAMES = {
    3: {"JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"},
    4: {"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"},
}
FIELD_CHARACTERS = re.compile(r"[0-9A-Za-z*,/-]+")


def check_posix_cron(expression: str) -> None:
    """The reference client's cron: five fields of numbers, ranges, lists and steps (months and weekdays
    also by name), day-of-week 0-7; no seconds or years, no `L`, `W`, `#`, `?`, no `@daily` shortcuts."""
    fields = expression.split()
    for index, field in enumerate(fields):
        words = {word.upper() for word in re.findall(r"[A-Za-z]+", field)}
        if not FIELD_CHARACTERS.fullmatch(field) or not words <= NAMES.get(index, set()):
            raise ScheduleError(
                f"{expression!r}: extended cron syntax (L, W, #, ?, shortcuts such as @daily) is not supported; "
                "use five fields: minute hour day-of-month month day-of-week."
            )
    check_schedule(expression)


class ScheduleSerializer(StrictSerializer):
    """`schedule`: a cron `expression` read on the clock of `timezone`; both required."""

    type = serializers.ChoiceField(choices=["cron"])
    expression = StrictCharField(max_length=256)
    timezone = StrictCharField(max_length=64)

    def validate_expression(self, value: str) -> str:
        return checked(check_posix_cron, value)

    def validate_timezone(self, value: str) -> str:
        return checked(check_timezone, value)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        try:
            next_fire_after(attrs["expression"], attrs["timezone"], timezone.now())
        except ScheduleError as error:
            raise serializers.ValidationError({"expression": [str(error)]}) from error
        return attrs


def checked(check: Callable[[str], object], value: str) -> str:
    """Run a check of the schedule on `value`, its ValueError a field error."""
    try:
        check(value)
    except ValueError as error:
        raise serializers.ValidationError(str(error)) from error
    return value


# -- initial events: the kinds a session's initial events take ------------------------------------------------
class SystemMessageSerializer(StrictSerializer):
    """`system.message` is in the reference client's deployment events; this registry's sessions do not take
    it (yet), so a deployment refuses it rather than fail every fire."""

    type = serializers.ChoiceField(choices=["system.message"])
    content = serializers.ListField(child=serializers.DictField(), allow_empty=False)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        raise serializers.ValidationError("system.message: this registry's sessions take no system.message events.")


INITIAL_EVENT_KINDS: dict[str, type[serializers.Serializer[Any]]] = {
    "system.message": SystemMessageSerializer,
    **INITIAL_EVENT_SERIALIZERS,
}


def initial_events_field(**options: Any) -> serializers.ListField:
    return serializers.ListField(
        child=TaggedUnionField(INITIAL_EVENT_KINDS, component_name="DeploymentInitialEvent"),
        min_length=1,
        max_length=INITIAL_EVENTS_MAX,
        **options,
    )


def resources_field(**options: Any) -> serializers.ListField:
    return serializers.ListField(
        child=TaggedUnionField(RESOURCE_KINDS, component_name="DeploymentResource"),
        max_length=RESOURCES_MAX,
        required=False,
        **options,
    )


def vault_ids_field(**options: Any) -> serializers.ListField:
    return serializers.ListField(
        child=serializers.RegexField(VAULT_ID), max_length=VAULTS_MAX, required=False, **options
    )


class DeploymentWriteSerializer(StrictSerializer):
    """The body of a create (`BetaDeploymentCreateParams`)."""

    name = StrictCharField(min_length=1, max_length=256)
    description = StrictCharField(required=False, allow_null=True, allow_blank=True, max_length=DESCRIPTION_MAX)
    agent = AgentReferenceField()
    environment_id = serializers.RegexField(ENVIRONMENT_ID)
    initial_events = initial_events_field()
    resources = resources_field()
    vault_ids = vault_ids_field()
    budget = BudgetSerializer(required=False, allow_null=True)
    metadata = MetadataField(required=False)
    schedule = ScheduleSerializer(required=False, allow_null=True)


class DeploymentUpdateSerializer(StrictSerializer):
    """The body of an update: omitted fields keep their value; null clears `description`, `resources`,
    `vault_ids`, `budget` and `schedule`; `metadata` is a patch (a null value deletes its key)."""

    name = StrictCharField(required=False, min_length=1, max_length=256)
    description = StrictCharField(required=False, allow_null=True, allow_blank=True, max_length=DESCRIPTION_MAX)
    agent = AgentReferenceField(required=False)
    environment_id = serializers.RegexField(ENVIRONMENT_ID, required=False)
    initial_events = initial_events_field(required=False)
    resources = resources_field(allow_null=True)
    vault_ids = vault_ids_field(allow_null=True)
    budget = BudgetSerializer(required=False, allow_null=True)
    metadata = MetadataField(required=False, allow_null=True, allow_null_values=True)
    schedule = ScheduleSerializer(required=False, allow_null=True)


# -- the objects ------------------------------------------------------------------------------------------------
class AgentReferenceSerializer(serializers.Serializer):  # type: ignore[type-arg]
    """`agent`: the agent and the version it is pinned to."""

    type = serializers.ChoiceField(choices=["agent"])
    id = serializers.CharField()
    version = serializers.IntegerField()


class ScheduleObjectSerializer(serializers.Serializer):  # type: ignore[type-arg]
    """`schedule` as a deployment shows it: the cron, the last scheduled run and up to five ticks to come."""

    type = serializers.ChoiceField(choices=["cron"])
    expression = serializers.CharField()
    timezone = serializers.CharField()
    last_run_at = serializers.DateTimeField(allow_null=True)
    upcoming_runs_at = serializers.ListField(child=serializers.DateTimeField())


class DeploymentSerializer(ArchivableObjectSerializer):
    """The deployment object (`BetaManagedAgentsDeployment`)."""

    type = ConstantField("deployment")
    name = serializers.CharField()
    description = serializers.CharField(allow_null=True)
    agent = AgentReferenceSerializer()
    environment_id = serializers.CharField()
    initial_events = serializers.ListField(child=serializers.DictField())
    resources = serializers.ListField(child=serializers.DictField())
    vault_ids = serializers.ListField(child=serializers.CharField())
    budget = BudgetSerializer(allow_null=True)
    metadata = MetadataMapField()
    schedule = ScheduleObjectSerializer(allow_null=True)
    status = serializers.ChoiceField(choices=Deployment.Status.values)
    paused_reason = serializers.DictField(allow_null=True)

    @classmethod
    def render(cls, deployment: Deployment) -> dict[str, Any]:
        return {
            "id": deployment.id,
            "type": "deployment",
            "name": deployment.name,
            "description": deployment.description,
            "agent": {"type": "agent", "id": deployment.agent_id, "version": deployment.agent_version},
            "environment_id": deployment.environment_id,
            "initial_events": deployment.initial_events,
            "resources": public_resources(deployment),
            "vault_ids": deployment.vault_ids,
            "budget": deployment.budget,
            "metadata": deployment.metadata,
            "schedule": render_schedule(deployment),
            "status": deployment.status,
            "paused_reason": deployment.paused_reason,
            "created_at": timestamp(deployment.created_at),
            "updated_at": timestamp(deployment.updated_at),
            "archived_at": timestamp(deployment.archived_at),
        }


def render_schedule(deployment: Deployment) -> dict[str, Any] | None:
    if deployment.schedule_expression is None:
        return None
    return {
        "type": "cron",
        "expression": deployment.schedule_expression,
        "timezone": deployment.schedule_timezone,
        "last_run_at": timestamp(deployment.last_run_at),
        "upcoming_runs_at": [timestamp(tick) for tick in selectors.upcoming_runs(deployment, now=timezone.now())],
    }


class DeploymentRunSerializer(CreatedObjectSerializer):
    """The deployment run object (`BetaManagedAgentsDeploymentRun`): exactly one of `session_id` and `error`."""

    type = ConstantField("deployment_run")
    deployment_id = serializers.CharField()
    agent = AgentReferenceSerializer()
    trigger_context = serializers.DictField()
    session_id = serializers.CharField(allow_null=True)
    error = serializers.DictField(allow_null=True)

    @classmethod
    def render(cls, run: DeploymentRun) -> dict[str, Any]:
        trigger_context: dict[str, Any] = {"type": run.trigger_type}
        if run.trigger_type == DeploymentRun.TriggerType.SCHEDULE:
            trigger_context["scheduled_at"] = timestamp(run.scheduled_at)
        return {
            "id": run.id,
            "type": "deployment_run",
            "deployment_id": run.deployment_id,
            "agent": {"type": "agent", "id": run.agent_id, "version": run.agent_version},
            "trigger_context": trigger_context,
            "session_id": run.session_id,
            "error": run.error,
            "created_at": timestamp(run.created_at),
        }
