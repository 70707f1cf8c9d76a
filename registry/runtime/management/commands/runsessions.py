"""`python manage.py runsessions`: run a session runtime worker, with its health server, until SIGTERM."""

from __future__ import annotations

import gc
import logging
import os
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from registry.core.observability import health_server
from registry.runtime.config import RuntimeSettings
from registry.runtime.worker import HEALTH_PORT, QUEUE_DEPTH, WORK_ITEMS_LIVE, WORK_QUEUE_DEPTH, Worker


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
        worker = Worker(config)
        health = health_server(HEALTH_PORT, worker.readiness, [QUEUE_DEPTH, WORK_QUEUE_DEPTH, WORK_ITEMS_LIVE])
        # Everything loaded so far lives as long as the process: out of the collector's sight, a full
        # collection walks only what turns allocate (one walking it all paused turns 100-260 ms here).
        gc.freeze()
        worker.run(once=options["once"], max_idle=options["max_idle"], health=health)
        if worker.abandoned:
            # Their threads wait in calls without a checkpoint (their leases are released, their writes
            # fenced out); the interpreter would wait for them at exit, so leave without it.
            logging.shutdown()
            sys.stdout.flush()
            os._exit(0)
