"""`runtriggers` observed from outside: its health server, and the fire metrics an overdue trigger moves."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from fakes.waiting import wait_until
from registry.triggers.models import Trigger, TriggerFire

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

OVERDUE = timedelta(minutes=5)


def make_trigger(api) -> Trigger:
    """A yearly trigger (no second fire while the test runs) that is five minutes overdue."""
    agent_id = api.post("/v1/agents", {"name": "a", "model": "m"}, format="json").json()["id"]
    environment_id = api.post("/v1/environments", {"name": "e"}, format="json").json()["id"]
    body = {
        "name": "yearly",
        "agent": agent_id,
        "source": {"type": "cron", "schedule": "0 0 1 1 *", "timezone": "UTC", "payload": "Go."},
        "session": {"environment_id": environment_id},
    }
    response = api.post("/v1/triggers", body, format="json")
    assert response.status_code == 200, response.content
    Trigger.objects.filter(pk=response.json()["id"]).update(next_fire_at=timezone.now() - OVERDUE)
    return Trigger.objects.get(pk=response.json()["id"])


def test_a_fire_moves_the_scheduler_metrics_and_sigterm_stops_it(tenant_api, watch):
    scheduler = watch("runtriggers", "--poll-seconds", "0.2")
    assert scheduler.get("/healthz").status_code == 200
    assert (scheduler.get("/readyz").status_code, scheduler.get("/readyz").text) == (200, "ready\n")
    assert scheduler.metric("registry_triggers_active") == 0
    assert scheduler.metric("registry_trigger_fire_lag_seconds_count") == 0

    trigger = make_trigger(tenant_api)
    wait_until(lambda: TriggerFire.objects.filter(trigger=trigger).exists(), what="the overdue fire")
    wait_until(lambda: scheduler.metric("registry_trigger_fires_total", outcome="session") == 1, what="the count")
    assert scheduler.metric("registry_trigger_fire_lag_seconds_count") == 1
    assert scheduler.metric("registry_trigger_fire_lag_seconds_sum") >= OVERDUE.total_seconds()
    assert scheduler.metric("registry_triggers_active") == 1

    assert scheduler.process.stop() == 0
    assert scheduler.log_lines()[-1]["message"] == "trigger scheduler stopped"
