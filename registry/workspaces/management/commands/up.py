"""`manage.py up`: every process of DESIGN.md's table in one process group (development only).

Migrates, creates a demo workspace on first start (printing its key once), then runs the registry
(daphne) and every other process that exists, until Ctrl-C or SIGTERM stops them all.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Any

from django.conf import settings
from django.core.management import call_command, get_commands
from django.core.management.base import BaseCommand, CommandParser
from django.db import connection

from registry.workspaces import services
from registry.workspaces.models import Workspace

DEMO_WORKSPACE = "demo"


class Command(BaseCommand):
    help = "Run the registry and every other process of the product, with the embedded defaults."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)

    def handle(self, *args: Any, **options: Any) -> None:
        settings.DATA_DIR.mkdir(parents=True, exist_ok=True)
        call_command("migrate", interactive=False, verbosity=0)
        self.ensure_demo_workspace()
        registry_url = f"http://{options['host']}:{options['port']}"
        self.stdout.write(f"Registry: {registry_url}  (OpenAPI: {registry_url}/openapi.json)")
        os.environ.setdefault("VAULT__DEMO__VENDOR_B", "placeholder-set-VAULT__DEMO__VENDOR_B")
        if self.embedded_runtime():
            os.environ["REGISTRY_RUNTIME_EMBEDDED"] = "1"
            self.stdout.write("Session runtime: embedded in the registry process (SQLite, in-memory channel layer)")
        processes = [subprocess.Popen(command) for command in self.process_commands(options)]
        self.wait(processes)

    def ensure_demo_workspace(self) -> None:
        existing = Workspace.objects.filter(name=DEMO_WORKSPACE).first()
        if existing is not None:
            self.stdout.write(
                f"Demo workspace {existing.pk} exists; its key was shown on first start. "
                f"Issue another with: python manage.py workspace key {existing.pk}"
            )
            return
        workspace, issued = services.workspace_create(name=DEMO_WORKSPACE)
        self.stdout.write(f"Created demo workspace {workspace.id}")
        self.stdout.write(f"Demo API key (shown once, send it as x-api-key): {issued.plaintext}")

    @staticmethod
    def embedded_runtime() -> bool:
        """On the embedded default (SQLite, no Redis) the runtime runs inside daphne, so deltas reach streams."""
        return connection.vendor == "sqlite" and not settings.REDIS_URL

    def process_commands(self, options: dict[str, Any]) -> list[list[str]]:
        """The registry, plus every other process of the table whose command exists."""
        manage = [sys.executable, str(settings.BASE_DIR / "manage.py")]
        commands = [
            [
                sys.executable,
                "-m",
                "daphne",
                "-b",
                options["host"],
                "-p",
                str(options["port"]),
                "settings.asgi:application",
            ]
        ]
        available = get_commands()
        demo_config = str(settings.BASE_DIR / "examples" / "gateway" / "demo.yaml")
        for name, extra in (("runsessions", []), ("runtriggers", []), ("rungateway", ["--config", demo_config])):
            if name == "runsessions" and self.embedded_runtime():
                continue
            if name in available:
                commands.append([*manage, name, *extra])
        return commands

    @staticmethod
    def wait(processes: list[subprocess.Popen[bytes]]) -> None:
        def stop(signum: int, frame: Any) -> None:
            for process in processes:
                process.terminate()

        signal.signal(signal.SIGTERM, stop)
        try:
            for process in processes:
                process.wait()
        except KeyboardInterrupt:
            stop(signal.SIGINT, None)
            for process in processes:
                process.wait()
