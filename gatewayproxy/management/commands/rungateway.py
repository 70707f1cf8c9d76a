"""`python manage.py rungateway --config FILE [--workers N]`: validate the config, then hand the process over
to the lean gateway entry point (`python -m gatewayproxy`), which serves without Django in memory."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

import gatewayproxy
from gatewayproxy.cli import load_and_check
from gatewayproxy.config.loader import ConfigError


class Command(BaseCommand):
    """Runs the gateway from a file-backed config (admin plane read-only)."""

    help = "Run the AI gateway (data and admin planes) from a YAML config file."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--config", required=True, help="path of the gateway YAML config")
        parser.add_argument("--workers", type=int, default=1, help="worker processes sharing the ports")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["workers"] < 1:
            raise CommandError("--workers must be at least 1")
        config = os.path.abspath(options["config"])
        try:
            load_and_check(config)
        except ConfigError as error:
            raise CommandError(str(error)) from None
        project_root = str(Path(gatewayproxy.__file__).resolve().parents[1])
        environment = {**os.environ, "PYTHONPATH": os.pathsep.join(
            filter(None, [project_root, os.environ.get("PYTHONPATH")]))}
        sys.stdout.flush()
        sys.stderr.flush()
        # The same process (same pid, so signals still reach it) continues as the lean gateway.
        os.execve(sys.executable, [sys.executable, "-m", "gatewayproxy", "--config", config,
                                   "--workers", str(options["workers"])], environment)
