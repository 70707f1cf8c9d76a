"""`python manage.py runtriggers`: the trigger scheduler with its health server (`--once`, or `--now`
for one pass at a given time, without one)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from registry.core.observability import health_server
from registry.triggers.scheduler import ACTIVE_TRIGGERS, HEALTH_PORT, Scheduler, run_once


def aware_instant(raw: str) -> datetime:
    """An ISO 8601 instant with its UTC offset (`2025-03-09T07:00:00Z`)."""
    try:
        instant = datetime.fromisoformat(raw)
    except ValueError as error:
        raise CommandError(f"--now: {raw!r} is not an ISO 8601 time.") from error
    if instant.tzinfo is None:
        raise CommandError(f"--now: {raw!r} needs a UTC offset, for example {raw}Z.")
    return instant


class Command(BaseCommand):
    """Fires due triggers; start several for availability, the fire rows keep each fire single."""

    help = "Run the trigger scheduler (several may run at once)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--once", action="store_true", help="Make one pass, then exit.")
        parser.add_argument(
            "--now", type=aware_instant, default=None, help="Make one pass as if the time were this (implies --once)."
        )
        parser.add_argument("--poll-seconds", type=float, default=1.0, help="Wait between passes (default 1).")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["once"] or options["now"] is not None:
            for fire in run_once(now=options["now"]):
                outcome = f"session {fire.session_id}" if fire.session_id else f"error: {fire.error}"
                self.stdout.write(f"{fire.trigger_id} fired for {fire.fire_at.isoformat()}: {outcome}")
            return
        scheduler = Scheduler(poll_seconds=options["poll_seconds"])
        scheduler.run(health=health_server(HEALTH_PORT, scheduler.readiness, [ACTIVE_TRIGGERS]))
