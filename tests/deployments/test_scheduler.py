"""Deployments on the triggers' scheduler, time under the test's control: one run per tick, one for a missed
window, nothing while paused or archived, a failing fire that pauses; and two schedulers (threads, then two
`runtriggers` processes) against one PostgreSQL firing each tick exactly once."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime, timedelta

import pytest
from django.utils import timezone

from registry.core.serialization import timestamp
from registry.deployments import services as deployment_services
from registry.deployments.models import Deployment, DeploymentRun
from registry.sessions.models import Session, SessionEvent
from registry.triggers import services as trigger_services
from registry.triggers.models import TriggerFire
from registry.triggers.scheduler import DEPLOYMENT_FIRES, fire_due_deployments, run_once
from registry.webhooks.models import WebhookEvent
from tests.deployments.conftest import EVERY_MINUTE
from tests.support import live
from tests.support.schedulers import race_schedulers

pytestmark = pytest.mark.django_db(transaction=True)

MINUTE = timedelta(minutes=1)
TICKS = 3


def due(workspace, **overrides) -> Deployment:
    """A deployment firing every minute whose next tick is in the past (the scheduler's clock is the test's)."""
    deployment = workspace.deploy(schedule=EVERY_MINUTE, **overrides)
    row = workspace.row(deployment.id)
    row.next_fire_at = next_tick(row) - 10 * MINUTE
    row.save(update_fields=["next_fire_at"])
    return row


def next_tick(deployment: Deployment) -> datetime:
    assert deployment.next_fire_at is not None
    return deployment.next_fire_at


def runs_of(deployment: Deployment) -> list[DeploymentRun]:
    return list(DeploymentRun.objects.filter(deployment=deployment).order_by("scheduled_at"))


def test_a_tick_fires_once_and_moves_the_schedule_on(workspace):
    deployment = due(workspace)
    tick = next_tick(deployment)
    assert run_once(now=tick - timedelta(seconds=1)) == [] and runs_of(deployment) == []
    fired = DEPLOYMENT_FIRES.labels("session")._value.get()

    assert run_once(now=tick) == []  # the list is the triggers' fires; the deployment's run is in the database
    (run,) = runs_of(deployment)
    assert DEPLOYMENT_FIRES.labels("session")._value.get() == fired + 1
    assert run.trigger_type == "schedule" and run.scheduled_at == tick and run.session_id and run.error is None
    assert [event.type for event in SessionEvent.objects.filter(session_id=run.session_id)] == ["user.message"]
    deployment.refresh_from_db()
    assert deployment.next_fire_at == tick + MINUTE and deployment.last_run_at == tick

    run_once(now=tick + timedelta(seconds=30))
    assert len(runs_of(deployment)) == 1
    shown = workspace.sdk.beta.deployment_runs.retrieve(run.id)
    assert shown.trigger_context.type == "schedule" and timestamp(shown.trigger_context.scheduled_at) == timestamp(tick)
    schedule = workspace.sdk.beta.deployments.retrieve(deployment.pk).schedule
    assert schedule.last_run_at == tick and schedule.upcoming_runs_at[0] == tick + MINUTE
    assert [run.id for run in workspace.sdk.beta.deployment_runs.list(trigger_type="schedule")] == [run.id]
    assert list(WebhookEvent.objects.filter(data__id=run.id).values_list("type", flat=True)) == [
        "deployment_run.started",
        "deployment_run.succeeded",
    ]


def test_a_missed_window_fires_once(workspace):
    deployment = due(workspace)
    tick = next_tick(deployment)
    late = tick + 5 * MINUTE + timedelta(seconds=20)
    run_once(now=late)
    run_once(now=late)
    (run,) = runs_of(deployment)
    assert run.scheduled_at == tick
    deployment.refresh_from_db()
    assert deployment.next_fire_at == tick + 6 * MINUTE


def test_paused_and_archived_deployments_do_not_fire(workspace):
    paused = due(workspace)
    archived = due(workspace)
    workspace.sdk.beta.deployments.pause(paused.pk)
    workspace.sdk.beta.deployments.archive(archived.pk)
    run_once(now=timezone.now() + MINUTE)
    assert DeploymentRun.objects.count() == 0


def test_a_failing_scheduled_fire_pauses_the_deployment(workspace):
    vault = workspace.sdk.beta.vaults.create(display_name="keys")
    deployment = due(workspace, vault_ids=[vault.id])
    workspace.sdk.beta.vaults.archive(vault.id)
    tick = next_tick(deployment)
    run_once(now=tick)
    (run,) = runs_of(deployment)
    assert run.error is not None and run.error["type"] == "vault_archived_error" and run.session_id is None
    deployment.refresh_from_db()
    assert deployment.status == "paused" and deployment.next_fire_at is None
    assert deployment.paused_reason == {"type": "error", "error": {"type": "vault_archived_error"}}
    assert deployment.last_run_at == tick
    run_once(now=tick + 5 * MINUTE)
    assert len(runs_of(deployment)) == 1


def test_triggers_fire_in_the_same_pass(workspace):
    body = {
        "name": "tick",
        "agent": {"type": "agent", "id": workspace.agent_id},
        "source": {"type": "cron", "schedule": "* * * * *", "timezone": "UTC", "payload": "Go."},
        "session": {"environment_id": workspace.environment_id},
    }
    trigger = trigger_services.trigger_create(workspace=workspace.tenant.workspace, values=body)
    deployment = due(workspace)
    assert trigger.next_fire_at is not None
    (fire,) = run_once(now=trigger.next_fire_at)
    assert fire.session_id and TriggerFire.objects.count() == 1
    assert len(runs_of(deployment)) == 1


def test_a_deployments_failure_does_not_stop_the_others(workspace, monkeypatch):
    broken, healthy = due(workspace), due(workspace)
    original = deployment_services.deployment_fire_due

    def fire(**arguments):
        if arguments["deployment_id"] == broken.pk:
            raise RuntimeError("lost the row")
        return original(**arguments)

    monkeypatch.setattr(deployment_services, "deployment_fire_due", fire)
    assert [run.deployment_id for run in fire_due_deployments(now=timezone.now())] == [healthy.pk]
    monkeypatch.undo()
    assert [run.deployment_id for run in fire_due_deployments(now=timezone.now())] == [broken.pk]  # next pass


def ticks_of(deployment: Deployment) -> list[datetime]:
    return [next_tick(deployment) + index * MINUTE for index in range(TICKS)]


def assert_one_run_per_tick(deployment: Deployment, ticks: list[datetime]) -> None:
    runs = runs_of(deployment)
    assert [run.scheduled_at for run in runs] == ticks
    assert all(run.session_id for run in runs)
    assert Session.objects.count() == len(ticks)
    started = WebhookEvent.objects.filter(type="deployment_run.started")
    assert sorted(started.values_list("data__id", flat=True)) == sorted(run.pk for run in runs)


def test_two_scheduler_threads_fire_each_tick_once(workspace):
    deployment = due(workspace)
    ticks = ticks_of(deployment)
    race_schedulers(ticks)
    assert_one_run_per_tick(deployment, ticks)


def runtriggers(*arguments: str) -> subprocess.Popen[bytes]:
    environment = {**os.environ, "DJANGO_SETTINGS_MODULE": "settings.base", "DATABASE_URL": live.test_database_url()}
    command = [sys.executable, "manage.py", "runtriggers", *arguments]
    return subprocess.Popen(command, cwd=live.ROOT, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_two_runtriggers_processes_fire_each_tick_once(workspace):
    deployment = due(workspace)
    ticks = ticks_of(deployment)
    for tick in ticks:
        processes = [runtriggers("--now", tick.isoformat()) for _ in range(2)]
        for process in processes:
            _, errors = process.communicate(timeout=120)
            assert process.returncode == 0, errors.decode()
    assert_one_run_per_tick(deployment, ticks)
