"""Fixtures of the tracing tests: a fake OTLP collector, the fake model and an MCP server on loopback, and a
live registry (daphne) and one `runsessions` worker exporting their spans to that collector (the shared pieces
are in tests/support/runtime/fixtures.py and tests/support/processes.py)."""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import pytest

from fakes.model import FakeModel
from tests.support.clients import registry_client
from tests.support.mcp_servers import ShopMcpServer
from tests.support.otlp_collector import FakeCollector
from tests.support.processes import LiveRegistry, Process, child_environment, start_runsessions
from tests.support.runtime.fixtures import fake_model, model, registry
from tests.support.serving import served
from tests.support.tenants import make_tenant

__all__ = ["fake_model", "model", "registry"]


@pytest.fixture(scope="package")
def collector() -> Iterator[FakeCollector]:
    yield from served(FakeCollector().start())


@pytest.fixture(scope="package")
def shop() -> Iterator[ShopMcpServer]:
    yield from served(ShopMcpServer().start())


@pytest.fixture(scope="package")
def child_env(django_db_setup: None, fake_model: FakeModel, collector: FakeCollector) -> dict[str, str]:
    """The registry's and the worker's environment: the test database, the fake model, the collector."""
    return child_environment(
        fake_model.url,
        REGISTRY_SANDBOX_BACKEND="none",
        REGISTRY_HEALTH_PORT="0",
        OTEL_EXPORTER_OTLP_ENDPOINT=collector.url,
        OTEL_BSP_SCHEDULE_DELAY="50",  # spans reach the collector within a tick, not the default 5 s
    )


@pytest.fixture(scope="package")
def worker(child_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Process]:
    process = start_runsessions(child_env, tmp_path_factory.mktemp("worker") / "worker.log")
    yield process
    process.stop()


@pytest.fixture
def sdk(registry: LiveRegistry, worker: Process, transactional_db: None) -> Iterator[anthropic.Anthropic]:
    client = registry_client(registry.url, make_tenant("tracing").api_key)
    yield client
    client.close()
