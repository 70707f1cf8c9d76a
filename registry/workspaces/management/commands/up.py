"""`manage.py up`: every process of DESIGN.md's table in one process group (development only).

Migrates, creates a demo workspace on first start (printing its key once), then runs the registry
(daphne) and every other process that exists, until Ctrl-C or SIGTERM stops them all.

Every port it binds moves with a flag or a variable: the registry (`--port`, `REGISTRY_PORT`, 8000),
the gateway's data and admin planes (`--gateway-port`, `GATEWAY_PORT`, 8080; `--gateway-admin-port`,
`GATEWAY_ADMIN_PORT`, 9099) and the health servers of runsessions, runtriggers and runwebhooks
(`--sessions-health-port`, `--triggers-health-port`, `--webhooks-health-port`: 9100, 9101 and 9102; 0 = a free
port, `off` = none). The runtime's model calls follow the gateway's port unless `REGISTRY_MODEL_BASE_URL` says
otherwise.

The gateway serves the config stored in the database (`rungateway --database`), so edits in the admin take
effect: on first start `examples/gateway/demo.yaml` is imported into the empty store, and every start moves the
stored listeners to the gateway's ports (`gateway seed`). `--gateway-config FILE` (`GATEWAY_CONFIG`) serves a
file instead; the registry is then told (GATEWAY_SERVES_FILE), and the admin's gateway pages say so.
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
SERVED_FILE_VARIABLE = "GATEWAY_SERVES_FILE"  # read by the admin's gateway config pages


class Command(BaseCommand):
    help = "Run the registry and every other process of the product, with the embedded defaults."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=int(os.environ.get("REGISTRY_PORT") or 8000))
        parser.add_argument("--gateway-port", type=int, default=int(os.environ.get("GATEWAY_PORT") or 8080))
        parser.add_argument("--gateway-admin-port", type=int, default=int(os.environ.get("GATEWAY_ADMIN_PORT") or 9099))
        parser.add_argument(
            "--gateway-config",
            default=os.environ.get("GATEWAY_CONFIG") or None,
            help="serve this YAML config file (default: the database config, seeded from examples/gateway/demo.yaml)",
        )
        parser.add_argument("--sessions-health-port", default="9100", help="a port, 0 (a free one) or off")
        parser.add_argument("--triggers-health-port", default="9101", help="a port, 0 (a free one) or off")
        parser.add_argument("--webhooks-health-port", default="9102", help="a port, 0 (a free one) or off")

    def handle(self, *args: Any, **options: Any) -> None:
        settings.DATA_DIR.mkdir(parents=True, exist_ok=True)
        call_command("migrate", interactive=False, verbosity=0)
        self.ensure_demo_workspace()
        registry_url = f"http://{options['host']}:{options['port']}"
        self.stdout.write(f"Registry: {registry_url}  (OpenAPI: {registry_url}/openapi.json)")
        os.environ.setdefault("VAULT__DEMO__VENDOR_B", "placeholder-set-VAULT__DEMO__VENDOR_B")
        os.environ.setdefault("REGISTRY_MODEL_BASE_URL", f"http://127.0.0.1:{options['gateway_port']}")
        self.stdout.write(f"Gateway: http://127.0.0.1:{options['gateway_port']}")
        self.prepare_gateway_config(options)
        if self.embedded_runtime():
            os.environ["REGISTRY_RUNTIME_EMBEDDED"] = "1"
            self.stdout.write("Session runtime: embedded in the registry process (SQLite, in-memory channel layer)")
        processes = [subprocess.Popen(command, env=env) for command, env in self.process_commands(options)]
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

    def prepare_gateway_config(self, options: dict[str, Any]) -> None:
        """Seed the database config (demo.yaml into an empty store, the listeners moved to the gateway's
        ports), or, with a file, tell the registry's admin which file the gateway serves."""
        if options["gateway_config"]:
            os.environ[SERVED_FILE_VARIABLE] = os.path.abspath(options["gateway_config"])
            self.stdout.write(
                f"Gateway config: the file {os.environ[SERVED_FILE_VARIABLE]} (admin edits do not reach it)"
            )
            return
        os.environ.pop(SERVED_FILE_VARIABLE, None)
        if "rungateway" not in get_commands():
            return
        call_command(
            "gateway",
            "seed",
            str(settings.BASE_DIR / "examples" / "gateway" / "demo.yaml"),
            f"--listen=127.0.0.1:{options['gateway_port']}",
            f"--admin-listen=127.0.0.1:{options['gateway_admin_port']}",
            stdout=self.stdout,
        )
        self.stdout.write("Gateway config: the database (edit it in the admin; seeded from examples/gateway/demo.yaml)")

    def gateway_arguments(self, options: dict[str, Any]) -> list[str]:
        """How `rungateway` is started: from the file given, or from the database (which names its listeners)."""
        if not options["gateway_config"]:
            return ["--database"]
        return [
            "--config",
            options["gateway_config"],
            f"--listen=127.0.0.1:{options['gateway_port']}",
            f"--admin-listen=127.0.0.1:{options['gateway_admin_port']}",
        ]

    @staticmethod
    def embedded_runtime() -> bool:
        """On the embedded default (SQLite, no Redis) the runtime runs inside daphne, so deltas reach streams."""
        return connection.vendor == "sqlite" and not settings.REDIS_URL

    def process_commands(self, options: dict[str, Any]) -> list[tuple[list[str], dict[str, str]]]:
        """The registry, plus every other process of the table whose command exists, each with its
        environment."""
        manage = [sys.executable, str(settings.BASE_DIR / "manage.py")]
        daphne = [sys.executable, "-m", "daphne", "-b", options["host"], "-p", str(options["port"])]
        commands = [([*daphne, "settings.asgi:application"], dict(os.environ))]
        gateway = self.gateway_arguments(options)
        others: tuple[tuple[str, list[str], dict[str, str]], ...] = (
            ("runsessions", [], {"REGISTRY_HEALTH_PORT": options["sessions_health_port"]}),
            ("runtriggers", [], {"REGISTRY_HEALTH_PORT": options["triggers_health_port"]}),
            ("runwebhooks", [], {"REGISTRY_HEALTH_PORT": options["webhooks_health_port"]}),
            ("rungateway", gateway, {}),
        )
        available = get_commands()
        for name, extra, env in others:
            if name == "runsessions" and self.embedded_runtime():
                continue
            if name in available:
                commands.append(([*manage, name, *extra], {**os.environ, **env}))
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
