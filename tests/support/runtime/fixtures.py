"""Fixtures shared by the packages that run the registry's processes (runtime, observability, tracing): the fake
model and the MCP server on loopback, the child environment, the live registry and the reference client.
A conftest imports the ones it uses; package-scoped ones then live once per importing package."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import anthropic
import pytest

from fakes.model import FakeModel
from registry.sandbox.disks import release_root
from tests.support.clients import registry_client
from tests.support.mcp_servers import ShopMcpServer
from tests.support.processes import LiveRegistry, child_environment, start_registry
from tests.support.serving import served
from tests.support.tenants import make_tenant


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


@pytest.fixture(scope="package")
def child_env(django_db_setup: None, fake_model: FakeModel) -> Iterator[dict[str, str]]:
    """The environment of the registry and worker subprocesses: the test database, the fake model, sandboxes."""
    # Under /tmp, which every session uid can traverse (a checkout may sit under a private directory).
    sandbox_root = f"/tmp/registry-test-sandboxes-{os.getpid()}"
    yield child_environment(fake_model.url, REGISTRY_SANDBOX_ROOT=sandbox_root)
    release_root(Path(sandbox_root))
    shutil.rmtree(sandbox_root, ignore_errors=True)


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
