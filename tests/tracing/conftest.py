"""Fixtures of the tracing tests: a fake OTLP collector, the fake model and an MCP server on loopback, and a
live registry (daphne) and one `runsessions` worker exporting their spans to that collector."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import anthropic
import httpx
import pytest
from django.db import connections

from tests.conftest import make_tenant
from tests.runtime.fake_model import FakeModel
from tests.runtime.helpers import LiveRegistry, Process
from tests.runtime.mcp_server import ShopMcpServer
from tests.support.live import free_port
from tests.support.waiting import wait_until
from tests.tracing.collector import FakeCollector


@pytest.fixture(scope="package")
def collector() -> Iterator[FakeCollector]:
    server = FakeCollector()
    yield server
    server.stop()


@pytest.fixture(scope="package")
def fake_model() -> Iterator[FakeModel]:
    server = FakeModel()
    yield server
    server.stop()


@pytest.fixture
def model(fake_model: FakeModel) -> Iterator[FakeModel]:
    fake_model.reset()
    yield fake_model
    fake_model.reset()


@pytest.fixture(scope="package")
def shop() -> Iterator[ShopMcpServer]:
    server = ShopMcpServer()
    yield server
    server.stop()


@pytest.fixture(scope="package")
def child_env(django_db_setup: None, fake_model: FakeModel, collector: FakeCollector) -> dict[str, str]:
    """The registry's and the worker's environment: the test database, the fake model, the collector."""
    database = connections["default"].settings_dict
    credentials = database["USER"] + (f":{database['PASSWORD']}" if database.get("PASSWORD") else "")
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.runtime.worker_settings",
        "DATABASE_URL": f"postgres://{credentials}@{database['HOST']}:{database['PORT']}/{database['NAME']}",
        "REGISTRY_MODEL_BASE_URL": fake_model.url,
        "REGISTRY_MODEL_API_KEY": "test-model-key",
        "REGISTRY_EGRESS_ALLOW": "127.0.0.1",
        "REGISTRY_SANDBOX_BACKEND": "none",
        "REGISTRY_HEALTH_PORT": "0",
        "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url,
        "OTEL_BSP_SCHEDULE_DELAY": "50",  # spans reach the collector within a tick, not the default 5 s
        "PYTHONUNBUFFERED": "1",
    }


def healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture(scope="package")
def registry(child_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveRegistry]:
    port = free_port()
    command = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "settings.asgi:application"]
    process = Process(command, env=child_env, log=tmp_path_factory.mktemp("registry") / "daphne.log")
    live = LiveRegistry(url=f"http://127.0.0.1:{port}", process=process)
    wait_until(lambda: healthy(live.url) or process.popen.poll() is not None, timeout=30, what="daphne")
    assert process.popen.poll() is None, process.log_tail()
    yield live
    process.stop()


@pytest.fixture(scope="package")
def worker(child_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Process]:
    command = [sys.executable, "manage.py", "runsessions", "--lease-seconds", "2", "--poll-seconds", "0.5"]
    process = Process(command, env=child_env, log=tmp_path_factory.mktemp("worker") / "worker.log")
    wait_until(lambda: "started" in process.log.read_text(), timeout=60, what="a runsessions worker to start")
    yield process
    process.stop()


@pytest.fixture
def sdk(registry: LiveRegistry, worker: Process, transactional_db: None) -> Iterator[anthropic.Anthropic]:
    tenant = make_tenant("tracing")
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
