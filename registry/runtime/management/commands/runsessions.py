"""`python manage.py runsessions`: run a session runtime worker until SIGTERM."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from registry.runtime.config import RuntimeSettings
from registry.runtime.worker import Worker


class Command(BaseCommand):
    """Claims sessions with pending work and runs their turns; start several to share the load."""

    help = "Run a session runtime worker (several may run at once)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--once", action="store_true", help="Run one session, then exit.")
        parser.add_argument("--max-idle", type=float, default=None, help="Exit after this many seconds without work.")
        parser.add_argument("--lease-seconds", type=float, default=None, help="Lease length (default 30).")
        parser.add_argument(
            "--poll-seconds", type=float, default=None, help="Safety-net poll between wake-ups (default 5)."
        )
        parser.add_argument(
            "--concurrency",
            type=int,
            default=None,
            help="Sessions run at once (default 32, REGISTRY_RUNTIME_CONCURRENCY).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        config = RuntimeSettings.from_settings(
            lease_seconds=options["lease_seconds"],
            poll_seconds=options["poll_seconds"],
            concurrency=options["concurrency"],
        )
        Worker(config).run(once=options["once"], max_idle=options["max_idle"])
