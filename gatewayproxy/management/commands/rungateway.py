"""`python manage.py rungateway --config FILE [--listen A] [--admin-listen A] | --database [--workers N]`:
validate the config (the file, or the rows stored in the database), then hand the process over to the lean
gateway entry point (`python -m gatewayproxy`)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

import gatewayproxy
from gatewayproxy.cli import add_listener_arguments, check_stored_config, listener_overrides, load_and_check
from gatewayproxy.config.loader import ConfigError


class Command(BaseCommand):
    """Runs the gateway from a file-backed config (admin read-only) or the database (admin writes on)."""

    help = "Run the AI gateway (data and admin planes) from a YAML config file or the database."

    def add_arguments(self, parser: CommandParser) -> None:
        source = parser.add_mutually_exclusive_group(required=True)
        source.add_argument("--config", help="path of the gateway YAML config")
        source.add_argument("--database", action="store_true", help="serve the config stored in the database")
        parser.add_argument("--workers", type=int, default=1, help="worker processes sharing the ports")
        add_listener_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        if options["workers"] < 1:
            raise CommandError("--workers must be at least 1")
        server = listener_overrides(options)
        if options["database"] and server:
            raise CommandError(
                "--listen and --admin-listen move a file config's listeners; a stored config names its own"
            )
        try:
            if options["database"]:
                check_stored_config()
                source = ["--database"]
            else:
                config = os.path.abspath(options["config"])
                load_and_check(config, server)
                source = ["--config", config, *(f"--{key.replace('_', '-')}={value}" for key, value in server.items())]
        except ConfigError as error:
            raise CommandError(str(error)) from None
        self._exec_gateway([*source, "--workers", str(options["workers"])])

    @staticmethod
    def _exec_gateway(arguments: list[str]) -> None:
        project_root = str(Path(gatewayproxy.__file__).resolve().parents[1])
        environment = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [project_root, os.environ.get("PYTHONPATH")])),
        }
        sys.stdout.flush()
        sys.stderr.flush()
        # The same process (same pid, so signals still reach it) continues as the lean gateway.
        os.execve(sys.executable, [sys.executable, "-m", "gatewayproxy", *arguments], environment)
