"""Fixtures of the observability tests: the shared fake model, MCP server, live registry and child
environment (tests/support/runtime/fixtures.py, as the runtime tests use them), and starters of
`runsessions` / `runtriggers` / daphne with their health or metrics ports (read through
tests/support/observability.py).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest

from fakes.waiting import wait_until
from tests.support.live import free_port
from tests.support.observability import Watched, started_line
from tests.support.processes import LiveRegistry, Process, healthy
from tests.support.runtime.fixtures import child_env, fake_model, model, registry, sdk, shop, shop_server
from tests.support.runtime.sessions import MODEL, Conversation
from tests.support.tenants import make_tenant

__all__ = ["child_env", "fake_model", "model", "registry", "sdk", "shop", "shop_server"]


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
