"""Fixtures of the runtime tests: a fake model and an MCP server on loopback, a live registry (daphne)
and `runsessions` workers as subprocesses on the pytest-django test database (the shared pieces are in
tests/support/runtime/fixtures.py and tests/support/processes.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import anthropic
import pytest

from tests.support.gateway.fixtures import gateway_factory
from tests.support.processes import LiveRegistry, Process, start_runsessions
from tests.support.runtime.fixtures import child_env, fake_model, model, registry, sdk, shop, shop_server
from tests.support.runtime.sessions import MODEL, Conversation, WorkerPool
from tests.support.sandbox_attacks import host_secret

__all__ = [
    "child_env",
    "fake_model",
    "gateway_factory",
    "host_secret",
    "model",
    "registry",
    "sdk",
    "shop",
    "shop_server",
]


@pytest.fixture(scope="package")
def worker_pool(child_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerPool]:
    """Two workers shared by the package's tests (a worker's start is slow: the mcp SDK and Django load).

    Package-scoped, so they are gone before any other package's tests create sessions.
    """
    directory = tmp_path_factory.mktemp("workers")
    pool = WorkerPool([start_runsessions(child_env, directory / f"worker-{index}.log") for index in range(2)])
    yield pool
    pool.stop()


@pytest.fixture
def workers(worker_pool: WorkerPool) -> Iterator[WorkerPool]:
    yield worker_pool
    worker_pool.resume()


@pytest.fixture
def start_worker(child_env: dict[str, str], tmp_path: Path) -> Iterator[Callable[..., Process]]:
    """Starts an extra worker for one test (keyword arguments: environment variables); stopped at the end."""
    started: list[Process] = []

    def start(**settings: str) -> Process:
        started.append(start_runsessions(child_env, tmp_path / f"worker-{len(started)}.log", **settings))
        return started[-1]

    yield start
    for process in started:
        process.stop()


@pytest.fixture
def open_session(sdk: anthropic.Anthropic, registry: LiveRegistry, workers: WorkerPool) -> Callable[..., Conversation]:
    """Create an agent (keyword arguments), an environment and a session on the given harness."""

    def open_session(
        *,
        harness: dict[str, Any] | None = None,
        vault_ids: list[str] | None = None,
        resources: list[dict[str, Any]] | None = None,
        environment: dict[str, Any] | None = None,
        **agent: Any,
    ) -> Conversation:
        created = sdk.beta.agents.create(name="runner", model=MODEL, **agent)
        made = sdk.beta.environments.create(name="env", **(environment or {}))
        extra = {"harness": harness} if harness else None
        session = sdk.beta.sessions.create(
            agent=created.id,
            environment_id=made.id,
            extra_body=extra,
            vault_ids=vault_ids or [],
            resources=cast(Any, resources or []),
        )
        return Conversation(sdk=sdk, session_id=session.id, processes=[registry.process, *workers.processes])

    return open_session
