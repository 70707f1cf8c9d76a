"""Fixtures of the observability tests: the shared fake model, MCP server, live registry and child
environment (tests/support/runtime_fixtures.py, as the runtime tests use them), and helpers to
start `runsessions` / `runtriggers` / daphne with their health or metrics ports and read what they expose.
"""

from __future__ import annotations

import json
import socket
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import make_tenant
from tests.runtime.helpers import MODEL, Conversation
from tests.support.live import free_port
from tests.support.processes import LiveRegistry, Process, healthy
from tests.support.runtime_fixtures import child_env, fake_model, model, registry, sdk, shop, shop_server
from tests.support.waiting import wait_until

__all__ = ["child_env", "fake_model", "model", "registry", "sdk", "shop", "shop_server"]


class Watched:
    """A process started with `REGISTRY_HEALTH_PORT=0` and `LOG_FORMAT=json`, and its health server."""

    def __init__(self, process: Process, started: dict[str, Any]) -> None:
        self.process = process
        self.started = started
        self.url = f"http://127.0.0.1:{started['message'].rsplit('health port ', 1)[1].rstrip(')')}"

    def get(self, path: str) -> httpx.Response:
        return httpx.get(f"{self.url}{path}", timeout=5)

    def metric(self, name: str, **labels: str) -> float | None:
        return sample(self.get("/metrics").text, name, **labels)

    def log_lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.process.log.read_text().splitlines() if line.strip()]


def sample(exposition: str, name: str, **labels: str) -> float | None:
    """The value of the sample `name` with these labels in a Prometheus text exposition, or None."""
    for family in text_string_to_metric_families(exposition):
        for item in family.samples:
            if item.name == name and all(item.labels.get(key) == value for key, value in labels.items()):
                return float(item.value)
    return None


def started_line(log: Path) -> dict[str, Any] | None:
    for line in log.read_text().splitlines():
        if line.startswith("{") and " started (" in (record := json.loads(line))["message"]:
            return dict(record)
    return None


@pytest.fixture
def watch(child_env: dict[str, str], tmp_path: Path) -> Iterator[Callable[..., Watched]]:
    """Start `manage.py <command> <arguments>` with a free health port and JSON logs (keyword arguments:
    more environment variables); whatever still runs is stopped at the end."""
    started: list[Process] = []

    def start(command: str, *arguments: str, **environment: str) -> Watched:
        log = tmp_path / f"{command}-{len(started)}.log"
        env = {**child_env, "REGISTRY_HEALTH_PORT": "0", "LOG_FORMAT": "json", **environment}
        started.append(Process([sys.executable, "manage.py", command, *arguments], env=env, log=log))
        line = wait_until(lambda: started_line(log), timeout=60, what=f"{command} to start")
        return Watched(started[-1], line)

    yield start
    for process in started:
        process.stop()


@pytest.fixture
def start_daphne(child_env: dict[str, str], tmp_path: Path) -> Iterator[Callable[..., int]]:
    """daphne on all interfaces with these environment variables; returns its port."""
    started: list[Process] = []

    def start(**environment: str) -> int:
        port = free_port()
        command = [sys.executable, "-m", "daphne", "-b", "0.0.0.0", "-p", str(port), "settings.asgi:application"]
        started.append(Process(command, env={**child_env, **environment}, log=tmp_path / f"daphne-{port}.log"))
        wait_until(lambda: healthy(f"http://127.0.0.1:{port}"), timeout=60, what="daphne to start")
        return port

    yield start
    for process in started:
        process.stop()


def outside_address() -> str:
    """This host's address on its outgoing interface, which is not loopback (a UDP connect sends nothing)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("198.51.100.1", 9))
        return str(probe.getsockname()[0])


@pytest.fixture
def open_chat(sdk: anthropic.Anthropic, registry: LiveRegistry) -> Callable[..., Conversation]:
    """An agent (keyword arguments), an environment and a session, run by whichever worker the test starts."""

    def open_chat(**agent: Any) -> Conversation:
        created = sdk.beta.agents.create(name="observed", model=MODEL, **agent)
        environment = sdk.beta.environments.create(name="env")
        session = sdk.beta.sessions.create(agent=created.id, environment_id=environment.id)
        return Conversation(sdk=sdk, session_id=session.id, processes=[registry.process])

    return open_chat


@pytest.fixture
def tenant_api(transactional_db: None) -> Any:
    return make_tenant("observed").client
