"""Process runners of the end-to-end tests: a child process with a log file, the environment of the registry's
children (the pytest-django test database, the fake model), the registry under daphne and `runsessions`
workers. The runtime, tracing and observability packages start their processes through these."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import httpx
from django.db import connections

from fakes.waiting import wait_until
from tests.support.live import daphne_command, listening_socket

MODEL_KEY = "test-model-key"
LEASE_SECONDS = "2"


class Process:
    """A child process whose output goes to a log file, stopped with SIGTERM (then SIGKILL)."""

    def __init__(self, command: list[str], *, env: dict[str, str], log: Path, pass_fds: tuple[int, ...] = ()) -> None:
        self.log = log
        with log.open("wb") as output:
            self.popen = subprocess.Popen(
                command, env=env, stdout=output, stderr=subprocess.STDOUT, cwd=os.getcwd(), pass_fds=pass_fds
            )

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def kill(self) -> None:
        self.popen.send_signal(signal.SIGKILL)
        self.popen.wait(timeout=10)

    def signal(self, signum: int) -> None:
        self.popen.send_signal(signum)

    def stop(self) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.popen.returncode


@dataclass(frozen=True)
class LiveRegistry:
    """daphne serving the registry, and where."""

    url: str
    process: Process


def child_environment(model_url: str, **extra: str) -> dict[str, str]:
    """The environment of the registry and worker subprocesses: this process's environment, the test database
    (pytest-django's, so call it once the database is set up), the fake model at `model_url`, and `extra`."""
    database = connections["default"].settings_dict
    credentials = database["USER"] + (f":{database['PASSWORD']}" if database.get("PASSWORD") else "")
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.support.subprocess_settings",
        "DATABASE_URL": f"postgres://{credentials}@{database['HOST']}:{database['PORT']}/{database['NAME']}",
        "REGISTRY_MODEL_BASE_URL": model_url,
        "REGISTRY_MODEL_API_KEY": MODEL_KEY,
        # The loopback MCP and OAuth servers of the tests are an operator exception to the egress rules.
        "REGISTRY_EGRESS_ALLOW": "127.0.0.1",
        "PYTHONUNBUFFERED": "1",
        **extra,
    }


def healthy(url: str) -> bool:
    """Whether `<url>/healthz` answers 200."""
    try:
        return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def start_registry(env: dict[str, str], log: Path) -> LiveRegistry:
    """daphne serving the registry (API and streams) on a loopback socket bound here and handed over, once it
    answers `/healthz`."""
    with listening_socket() as listener:
        process = Process(daphne_command(listener), env=env, log=log, pass_fds=(listener.fileno(),))
        live = LiveRegistry(url=f"http://127.0.0.1:{listener.getsockname()[1]}", process=process)

    def up() -> bool:
        if process.popen.poll() is not None:
            raise RuntimeError(f"daphne did not start:\n{process.log_tail()}")
        return healthy(live.url)

    try:
        wait_until(up, timeout=30, what="daphne to start")
    except AssertionError:
        process.stop()
        raise
    return live


def start_runsessions(env: dict[str, str], log: Path, **settings: str) -> Process:
    """A `runsessions` worker, once it logs that it started; `settings` are extra environment variables."""
    command = [sys.executable, "manage.py", "runsessions", "--lease-seconds", LEASE_SECONDS, "--poll-seconds", "0.5"]
    process = Process(command, env={**env, **settings}, log=log)
    wait_until(lambda: "started" in process.log.read_text(), timeout=60, what="a runsessions worker to start")
    return process
