"""The trigger scheduler with time under the test's control: one session per tick, one fire for a
missed window, daylight-saving changes, failures, and two schedulers (threads, then two
`runtriggers` processes) against one PostgreSQL starting exactly one session per tick."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from fakes.waiting import wait_until
from registry.core.schedule import next_fire_after
from registry.core.serialization import timestamp
from registry.sessions.models import Session, SessionEvent
from registry.triggers import services
from registry.triggers.models import Trigger, TriggerFire
from registry.triggers.scheduler import run_once
from tests.support import live
from tests.support.schedulers import race_schedulers

MINUTE = timedelta(minutes=1)


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


@pytest.fixture
def environment_id(api):
    return api.post("/v1/environments", {"name": "sandbox"}, format="json").json()["id"]


@pytest.fixture
def make_trigger(api, environment_id):
    agent_id = api.post("/v1/agents", {"name": "a", "model": "m"}, format="json").json()["id"]

    def make(schedule="* * * * *", timezone="UTC", start=None):
        body = {
            "name": "tick",
            "agent": agent_id,
            "source": {"type": "cron", "schedule": schedule, "timezone": timezone, "payload": "Go."},
            "session": {"environment_id": environment_id, "title_template": "{trigger_name} {fired_at}"},
        }
        response = api.post("/v1/triggers", body, format="json")
        assert response.status_code == 200, response.content
        trigger = Trigger.objects.get(pk=response.json()["id"])
        if start is not None:  # pretend the trigger was created at `start`
            trigger.next_fire_at = next_fire_after(schedule, timezone, start)
            trigger.save(update_fields=["next_fire_at"])
        return trigger

    return make


def fire_times(trigger):
    return list(TriggerFire.objects.filter(trigger=trigger).order_by("fire_at").values_list("fire_at", flat=True))


def run_through(trigger, count):
    """Run the scheduler at each of the trigger's next `count` fire times; the fire times seen."""
    for _ in range(count):
        trigger.refresh_from_db()
        assert len(run_once(now=trigger.next_fire_at)) == 1
    return fire_times(trigger)


# -- fire times across daylight-saving changes -------------------------------------------------------
@pytest.mark.parametrize(
    ("schedule", "zone", "after", "expected"),
    [
        # 02:00 does not exist on 9 March in New York: the fire moves to 03:00 EDT (07:00Z).
        (
            "0 2 * * *",
            "America/New_York",
            utc(2025, 3, 7, 12),
            [utc(2025, 3, 8, 7), utc(2025, 3, 9, 7), utc(2025, 3, 10, 6), utc(2025, 3, 11, 6)],
        ),
        (
            "0 2 * * *",
            "America/New_York",
            utc(2025, 10, 31, 12),
            [utc(2025, 11, 1, 6), utc(2025, 11, 2, 7), utc(2025, 11, 3, 7)],
        ),
        # 01:30 happens twice on 2 November in New York: it fires on the first only.
        (
            "30 1 * * *",
            "America/New_York",
            utc(2025, 11, 1, 12),
            [utc(2025, 11, 2, 5, 30), utc(2025, 11, 3, 6, 30)],
        ),
        # An hour field of `*` fires on both occurrences of the repeated hour.
        (
            "0 * * * *",
            "America/New_York",
            utc(2025, 11, 2, 4, 30),
            [utc(2025, 11, 2, 5), utc(2025, 11, 2, 6), utc(2025, 11, 2, 7)],
        ),
        (
            "30 1 * * *",
            "Europe/Berlin",
            utc(2025, 3, 29, 12),
            [utc(2025, 3, 30, 0, 30), utc(2025, 3, 30, 23, 30)],
        ),
        (
            "30 1 * * *",
            "Europe/Berlin",
            utc(2025, 10, 25, 12),
            [utc(2025, 10, 25, 23, 30), utc(2025, 10, 27, 0, 30)],
        ),
        (
            "30 2 * * *",
            "Europe/Berlin",
            utc(2025, 10, 25, 12),
            [utc(2025, 10, 26, 0, 30), utc(2025, 10, 27, 1, 30)],
        ),
    ],
)
def test_next_fire_after_across_daylight_saving(schedule, zone, after, expected):
    seen = []
    for _ in expected:
        after = next_fire_after(schedule, zone, after)
        seen.append(after)
    assert seen == expected


def test_scheduler_across_spring_forward(make_trigger):
    trigger = make_trigger("0 2 * * *", "America/New_York", start=utc(2025, 3, 7, 12))
    assert run_through(trigger, 4) == [utc(2025, 3, 8, 7), utc(2025, 3, 9, 7), utc(2025, 3, 10, 6), utc(2025, 3, 11, 6)]


def test_scheduler_fires_a_repeated_wall_time_once(make_trigger):
    trigger = make_trigger("30 1 * * *", "America/New_York", start=utc(2025, 11, 1, 12))
    assert run_through(trigger, 1) == [utc(2025, 11, 2, 5, 30)]
    assert run_once(now=utc(2025, 11, 2, 6, 30)) == []  # 01:30 EST, the second 01:30
    trigger.refresh_from_db()
    assert trigger.next_fire_at == utc(2025, 11, 3, 6, 30)


@pytest.mark.parametrize(
    ("start", "expected"),
    [
        (utc(2025, 3, 29, 12), [utc(2025, 3, 30, 0, 30), utc(2025, 3, 30, 23, 30)]),
        (utc(2025, 10, 25, 12), [utc(2025, 10, 25, 23, 30), utc(2025, 10, 27, 0, 30)]),
    ],
)
def test_scheduler_in_berlin_across_both_changes(make_trigger, start, expected):
    trigger = make_trigger("30 1 * * *", "Europe/Berlin", start=start)
    assert run_through(trigger, 2) == expected


# -- one scheduler -------------------------------------------------------------------------------
def test_each_tick_fires_once(make_trigger):
    trigger = make_trigger()
    first = trigger.next_fire_at
    assert run_once(now=first - timedelta(seconds=1)) == []
    assert [fire.fire_at for fire in run_once(now=first)] == [first]
    assert run_once(now=first + timedelta(seconds=30)) == []
    assert [fire.fire_at for fire in run_once(now=first + MINUTE)] == [first + MINUTE]
    trigger.refresh_from_db()
    assert trigger.next_fire_at == first + 2 * MINUTE and trigger.last_fired_at == first + MINUTE
    assert Session.objects.count() == 2


def test_missed_window_fires_once(make_trigger):
    trigger = make_trigger()
    first = trigger.next_fire_at
    back_up = first + 10 * MINUTE + timedelta(seconds=5)
    assert [fire.fire_at for fire in run_once(now=back_up)] == [first]
    assert run_once(now=back_up) == []
    trigger.refresh_from_db()
    assert trigger.next_fire_at == first + 11 * MINUTE and trigger.last_fired_at == back_up
    assert Session.objects.count() == 1


def test_a_fire_starts_the_session_of_the_template(make_trigger, environment_id):
    trigger = make_trigger()
    (fire,) = run_once(now=trigger.next_fire_at)
    session = Session.objects.get(pk=fire.session_id)
    assert session.environment_id == environment_id
    assert session.title == f"tick {timestamp(fire.fire_at)}"
    event = SessionEvent.objects.get(session=session)
    assert (event.type, event.body) == ("user.message", {"content": [{"type": "text", "text": "Go."}]})


def test_a_failed_fire_sets_error_and_the_schedule_goes_on(api, make_trigger, environment_id):
    trigger = make_trigger()
    first = trigger.next_fire_at
    api.post(f"/v1/environments/{environment_id}/archive")
    (fire,) = run_once(now=first)
    assert fire.session_id is None and "archived" in (fire.error or "")
    trigger.refresh_from_db()
    assert (trigger.status, trigger.error, trigger.last_fired_at) == ("error", fire.error, None)
    assert trigger.next_fire_at == first + MINUTE
    fresh = api.post("/v1/environments", {"name": "fresh"}, format="json").json()["id"]
    api.post(f"/v1/triggers/{trigger.id}", {"session": {"environment_id": fresh}}, format="json")
    (fire,) = run_once(now=first + MINUTE)
    trigger.refresh_from_db()
    assert fire.session_id is not None
    assert (trigger.status, trigger.error, trigger.last_fired_at) == ("active", None, first + MINUTE)


@pytest.mark.parametrize("action", ["pause", "archive"])
def test_paused_and_archived_triggers_do_not_fire(api, make_trigger, action):
    trigger = make_trigger()
    api.post(f"/v1/triggers/{trigger.id}/{action}")
    assert run_once(now=trigger.next_fire_at + 5 * MINUTE) == []
    assert not Session.objects.exists()


@pytest.mark.parametrize("action", ["pause", "reschedule"])
def test_a_claim_on_a_changed_trigger_is_given_back(api, make_trigger, action):
    """The trigger changed between the scheduler's due query and its claim: no fire, no row."""
    trigger = make_trigger()
    due = trigger.next_fire_at
    if action == "pause":
        api.post(f"/v1/triggers/{trigger.id}/pause")
    else:
        api.post(f"/v1/triggers/{trigger.id}", {"source": {"schedule": "0 0 1 1 *"}}, format="json")
    assert services.trigger_fire_due(trigger_id=trigger.id, fire_at=due, now=due) is None
    assert not TriggerFire.objects.exists() and not Session.objects.exists()


def test_a_fire_whose_row_exists_is_not_fired_again(make_trigger):
    """What a second scheduler meets: the trigger still looks due, but the fire's row is taken."""
    trigger = make_trigger()
    due = trigger.next_fire_at
    TriggerFire.objects.create(trigger=trigger, fire_at=due)
    assert services.trigger_fire_due(trigger_id=trigger.id, fire_at=due, now=due) is None
    assert TriggerFire.objects.count() == 1 and not Session.objects.exists()


# -- two schedulers against one PostgreSQL ---------------------------------------------------------
TICKS = 3


def ticks_of(trigger):
    return [trigger.next_fire_at + index * MINUTE for index in range(TICKS)]


def assert_one_session_per_tick(trigger, ticks):
    fires = TriggerFire.objects.filter(trigger=trigger)
    assert sorted(fires.values_list("fire_at", flat=True)) == ticks
    assert all(fire.session_id for fire in fires)
    assert Session.objects.filter(trigger_fires__trigger=trigger).count() == len(ticks) == Session.objects.count()


@pytest.mark.django_db(transaction=True)
def test_two_scheduler_threads_start_one_session_per_tick(make_trigger):
    trigger = make_trigger()
    ticks = ticks_of(trigger)
    fired: Counter[datetime] = Counter()
    race_schedulers(ticks, fired=lambda fires: fired.update(fire.fire_at for fire in fires))
    assert fired == Counter(ticks)
    assert_one_session_per_tick(trigger, ticks)


def runtriggers(*arguments):
    environment = {**os.environ, "DJANGO_SETTINGS_MODULE": "settings.base", "DATABASE_URL": live.test_database_url()}
    command = [sys.executable, "manage.py", "runtriggers", *arguments]
    return subprocess.Popen(command, cwd=live.ROOT, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@pytest.mark.django_db(transaction=True)
def test_two_runtriggers_processes_start_one_session_per_tick(make_trigger):
    trigger = make_trigger()
    ticks = ticks_of(trigger)
    reports = []
    for tick in ticks:
        processes = [runtriggers("--now", tick.isoformat()) for _ in range(2)]
        for process in processes:
            out, err = process.communicate(timeout=120)
            assert process.returncode == 0, err.decode()
            reports.extend(out.decode().splitlines())
    assert len(reports) == len(ticks)
    assert all(line.startswith(f"{trigger.id} fired for ") and ": session sesn_" in line for line in reports)
    assert_one_session_per_tick(trigger, ticks)


@pytest.mark.django_db(transaction=True)
def test_runtriggers_loop_fires_an_overdue_trigger_and_stops_on_sigterm(make_trigger):
    overdue = timezone.now() - 5 * MINUTE  # as if the scheduler had been down for five minutes
    trigger = make_trigger("0 0 1 1 *")  # yearly: no second fire while the test runs
    Trigger.objects.filter(pk=trigger.pk).update(next_fire_at=overdue)
    process = runtriggers("--poll-seconds", "0.1")
    try:
        wait_until(
            lambda: TriggerFire.objects.exists() or process.poll() is not None, timeout=60, what="the overdue fire"
        )
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    assert process.returncode == 0, err.decode()
    assert fire_times(trigger) == [overdue]
    trigger.refresh_from_db()
    assert trigger.next_fire_at > timezone.now() and trigger.last_fired_at is not None
