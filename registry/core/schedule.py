"""Cron arithmetic of triggers and deployments: validating a schedule and a timezone, and the next fire
time after an instant.

Schedules are read on the trigger's local wall clock (croniter on naive local times) and every fire
time is stored as a UTC instant, so daylight-saving changes move nothing but the UTC offset.
"""

from __future__ import annotations

import functools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, available_timezones

from croniter import CroniterBadDateError, croniter

CRON_FIELDS = 5
# Wider than any daylight-saving shift: a wall time shifted past a gap, or repeated after a
# fall-back, can be this far from the instant the search starts at.
SHIFT_MARGIN = timedelta(hours=2)


class ScheduleError(ValueError):
    """A schedule or timezone that cannot be used; the message says why."""


@functools.cache
def known_timezones() -> frozenset[str]:
    return frozenset(available_timezones())


def check_timezone(name: str) -> ZoneInfo:
    """The IANA zone of `name`, or ScheduleError."""
    if name not in known_timezones():
        raise ScheduleError(f"{name!r} is not an IANA timezone name (for example 'Europe/Berlin' or 'UTC').")
    return ZoneInfo(name)


def check_schedule(expression: str) -> None:
    """A five-field cron expression (minute hour day-of-month month day-of-week) croniter accepts."""
    if len(expression.split()) != CRON_FIELDS or not croniter.is_valid(expression):
        raise ScheduleError(
            f"{expression!r} is not a cron expression of five fields (minute hour day-of-month month day-of-week)."
        )


def wall_clock(instant: datetime, zone: ZoneInfo) -> datetime:
    """What a clock in `zone` shows at `instant`, as a naive datetime."""
    return instant.astimezone(zone).replace(tzinfo=None)


def instants_of(wall: datetime, zone: ZoneInfo, *, every_occurrence: bool) -> list[datetime]:
    """The UTC instants at which the clock of `zone` shows `wall`.

    A wall time skipped by a spring-forward gap maps to the instant just as far past the gap (02:30
    becomes 03:30). A wall time repeated by a fall-back maps to its first occurrence only, unless
    `every_occurrence` (schedules whose hour field is `*`, as in Vixie cron).
    """
    first = wall.replace(tzinfo=zone)
    second = wall.replace(tzinfo=zone, fold=1)
    repeated = first.utcoffset() != second.utcoffset() and wall_clock(first, zone) == wall
    chosen = (first, second) if repeated and every_occurrence else (first,)
    return [moment.astimezone(UTC) for moment in chosen]


def next_fire_after(expression: str, timezone_name: str, after: datetime) -> datetime:
    """The first fire time of `expression` in `timezone_name` strictly after `after` (aware), in UTC."""
    zone = check_timezone(timezone_name)
    check_schedule(expression)
    every_occurrence = expression.split()[1] == "*"
    candidates = croniter(expression, wall_clock(after, zone) - SHIFT_MARGIN)
    best: datetime | None = None
    try:
        while True:
            wall = candidates.get_next(datetime)
            if best is not None and wall > wall_clock(best, zone) + SHIFT_MARGIN:
                return best
            for instant in instants_of(wall, zone, every_occurrence=every_occurrence):
                if instant > after and (best is None or instant < best):
                    best = instant
    except CroniterBadDateError as error:
        raise ScheduleError("the schedule never matches.") from error
