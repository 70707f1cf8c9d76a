"""Fixtures shared by the packages that run the registry's processes (runtime, threads, observability, tracing):
the fake model and the MCP server on loopback, the child environment, the live registry, the reference client,
and `runsessions` workers (a package's shared pool, and extra ones per test).
`open_session` and `team` (an orchestrator with a roster) open sessions on them. A conftest imports the ones it
uses; package-scoped ones then live once per importing package."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import anthropic
import pytest

from fakes.model import FakeModel
from registry.sandbox.disks import release_root
from tests.support.clients import registry_client
from tests.support.mcp_servers import ShopMcpServer
from tests.support.processes import LiveRegistry, Process, child_environment, start_registry, start_runsessions
from tests.support.runtime.sessions import MODEL, Conversation, WorkerPool
from tests.support.serving import served
from tests.support.tenants import make_tenant

TOOLSET: Any = {"type": "agent_toolset_20260401"}


@pytest.fixture(scope="package")
def fake_model() -> Iterator[FakeModel]:
    yield from served(FakeModel())


@pytest.fixture
def model(fake_model: FakeModel) -> Iterator[FakeModel]:
    """The fake model with an empty script and no recorded requests."""
    fake_model.reset()
    yield fake_model
    fake_model.reset()


@pytest.fixture(scope="package")
def shop_server() -> Iterator[ShopMcpServer]:
    yield from served(ShopMcpServer().start())


@pytest.fixture
def shop(shop_server: ShopMcpServer) -> ShopMcpServer:
    shop_server.calls.clear()
    return shop_server


def sandboxed_environment(model_url: str, name: str, **extra: str) -> Iterator[dict[str, str]]:
    """The environment of the registry and worker subprocesses: the test database, the model at `model_url`,
    sandboxes under a root of this `name` (removed afterwards), and `extra`."""
    # Under /tmp, which every session uid can traverse (a checkout may sit under a private directory).
    sandbox_root = f"/tmp/registry-test-{name}-{os.getpid()}"
    yield child_environment(model_url, REGISTRY_SANDBOX_ROOT=sandbox_root, **extra)
    release_root(Path(sandbox_root))
    shutil.rmtree(sandbox_root, ignore_errors=True)


@pytest.fixture(scope="package")
def child_env(django_db_setup: None, fake_model: FakeModel) -> Iterator[dict[str, str]]:
    """The subprocesses' environment with the fake model and sandboxes."""
    yield from sandboxed_environment(fake_model.url, "sandboxes")


@pytest.fixture(scope="package")
def registry(child_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveRegistry]:
    """daphne serving the registry (API and streams) on a free loopback port, with the package's `child_env`."""
    live = start_registry(child_env, tmp_path_factory.mktemp("registry") / "daphne.log")
    yield live
    live.process.stop()


@pytest.fixture
def sdk(registry: LiveRegistry, transactional_db: None) -> Iterator[anthropic.Anthropic]:
    client = registry_client(registry.url, make_tenant("runtime").api_key)
    yield client
    client.close()


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


@pytest.fixture
def team(sdk: anthropic.Anthropic, registry: LiveRegistry, workers: WorkerPool) -> Callable[..., Conversation]:
    """A session of an orchestrator whose roster is `researcher` and `writer` (both with the built-in tools);
    keyword arguments replace members of its `multiagent`, set the session's `budget` or add agent fields."""

    def open_team(**overrides: Any) -> Conversation:
        researcher = sdk.beta.agents.create(name="researcher", model=MODEL, description="finds", tools=[TOOLSET])
        writer = sdk.beta.agents.create(name="writer", model=MODEL, description="writes", tools=[TOOLSET])
        multiagent: dict[str, Any] = {
            "type": "multiagent_20261001",
            "subagents": {"type": "enabled", "predefined_agents": [researcher.id, writer.id]},
            **{key: overrides.pop(key) for key in ("subagents", "advisor") if key in overrides},
        }
        session_fields = {"budget": overrides.pop("budget")} if "budget" in overrides else {}
        fields: dict[str, Any] = {"tools": [TOOLSET], **overrides}
        boss = sdk.beta.agents.create(name="boss", model=MODEL, multiagent=multiagent, **fields)  # type: ignore[arg-type]
        environment = sdk.beta.environments.create(name="env")
        session = sdk.beta.sessions.create(agent=boss.id, environment_id=environment.id, **session_fields)
        return Conversation(sdk=sdk, session_id=session.id, processes=[registry.process, *workers.processes])

    return open_team
