"""Fixtures of the runtime tests: a fake model and an MCP server on loopback, a live registry (daphne)
and `runsessions` workers as subprocesses on the pytest-django test database.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import anthropic
import httpx
import pytest
from django.db import connections

from tests.conftest import make_tenant
from tests.runtime.fake_model import FakeModel
from tests.runtime.helpers import MODEL, Conversation, LiveRegistry, Process, WorkerPool
from tests.runtime.mcp_server import ShopMcpServer
from tests.support.live import free_port
from tests.support.waiting import wait_until

MODEL_KEY = "test-model-key"
LEASE_SECONDS = "2"


@pytest.fixture(scope="package")
def fake_model() -> Iterator[FakeModel]:
    server = FakeModel()
    yield server
    server.stop()


@pytest.fixture
def model(fake_model: FakeModel) -> Iterator[FakeModel]:
    """The fake model with an empty script and no recorded requests."""
    fake_model.reset()
    yield fake_model
    fake_model.reset()


@pytest.fixture(scope="package")
def shop_server() -> Iterator[ShopMcpServer]:
    server = ShopMcpServer()
    yield server
    server.stop()


@pytest.fixture
def shop(shop_server: ShopMcpServer) -> ShopMcpServer:
    shop_server.calls.clear()
    return shop_server


@pytest.fixture(scope="package")
def child_env(django_db_setup: None, fake_model: FakeModel) -> Iterator[dict[str, str]]:
    """The environment of the registry and worker subprocesses: the test database, the fake model."""
    database = connections["default"].settings_dict
    credentials = database["USER"] + (f":{database['PASSWORD']}" if database.get("PASSWORD") else "")
    sandbox_root = f"/tmp/registry-test-sandboxes-{os.getpid()}"
    yield {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.runtime.worker_settings",
        "DATABASE_URL": f"postgres://{credentials}@{database['HOST']}:{database['PORT']}/{database['NAME']}",
        "REGISTRY_MODEL_BASE_URL": fake_model.url,
        "REGISTRY_MODEL_API_KEY": MODEL_KEY,
        # The loopback MCP and OAuth servers of the tests are an operator exception to the egress rules.
        "REGISTRY_EGRESS_ALLOW": "127.0.0.1",
        # Under /tmp, which every session uid can traverse (a checkout may sit under a private directory).
        "REGISTRY_SANDBOX_ROOT": sandbox_root,
        "PYTHONUNBUFFERED": "1",
    }
    shutil.rmtree(sandbox_root, ignore_errors=True)


@pytest.fixture(scope="package")
def registry(child_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveRegistry]:
    """daphne serving the registry (API and streams) on a free loopback port."""
    port = free_port()
    command = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "settings.asgi:application"]
    process = Process(command, env=child_env, log=tmp_path_factory.mktemp("registry") / "daphne.log")
    live = LiveRegistry(url=f"http://127.0.0.1:{port}", process=process)
    deadline = time.monotonic() + 30
    while not _healthy(live.url):
        if time.monotonic() > deadline or process.popen.poll() is not None:
            raise RuntimeError(f"daphne did not start:\n{process.log_tail()}")
        time.sleep(0.1)
    yield live
    process.stop()


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def runsessions(child_env: dict[str, str], log: Path, **settings: str) -> Process:
    """A worker; `settings` are extra environment variables (REGISTRY_MODEL_CONTEXT_TOKENS=...)."""
    command = [sys.executable, "manage.py", "runsessions", "--lease-seconds", LEASE_SECONDS, "--poll-seconds", "0.5"]
    process = Process(command, env={**child_env, **settings}, log=log)
    wait_until(lambda: "started" in process.log.read_text(), timeout=60, what="a runsessions worker to start")
    return process


@pytest.fixture(scope="package")
def worker_pool(child_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerPool]:
    """Two workers shared by the package's tests (a worker's start is slow: the mcp SDK and Django load).

    Package-scoped, so they are gone before any other package's tests create sessions.
    """
    directory = tmp_path_factory.mktemp("workers")
    pool = WorkerPool([runsessions(child_env, directory / f"worker-{index}.log") for index in range(2)])
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
        started.append(runsessions(child_env, tmp_path / f"worker-{len(started)}.log", **settings))
        return started[-1]

    yield start
    for process in started:
        process.stop()


@pytest.fixture
def sdk(registry: LiveRegistry, transactional_db: None) -> Iterator[anthropic.Anthropic]:
    tenant = make_tenant("runtime")
    client = anthropic.Anthropic(
        base_url=registry.url,
        api_key=None,
        auth_token=None,
        default_headers={"x-api-key": tenant.api_key},
        max_retries=0,
        timeout=30,
    )
    yield client
    client.close()


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
