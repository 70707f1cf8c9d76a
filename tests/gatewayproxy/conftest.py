"""Fixtures of the gateway tests: fake providers, an MCP upstream and gateways on loopback."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.gatewayproxy.fake_provider import FakeProvider
from tests.gatewayproxy.harness import vault_keys
from tests.gatewayproxy.mcp_upstream import RecordingMcpServer


@pytest.fixture(scope="session")
def primary() -> Iterator[FakeProvider]:
    """A provider named `primary`."""
    provider = FakeProvider("primary").start()
    yield provider
    provider.stop()


@pytest.fixture(scope="session")
def secondary() -> Iterator[FakeProvider]:
    """A provider named `secondary`."""
    provider = FakeProvider("secondary").start()
    yield provider
    provider.stop()


@pytest.fixture(scope="module")
def provider_keys() -> Iterator[None]:
    """Credentials `a` and `b` of the `keys` env vault (provider-a-key, provider-b-key), for one module."""
    with vault_keys(a="provider-a-key", b="provider-b-key"):
        yield


@pytest.fixture(scope="module")
def upstream() -> Iterator[RecordingMcpServer]:
    """An MCP server on loopback, one per test module."""
    server = RecordingMcpServer().start()
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def _fresh_providers(request: pytest.FixtureRequest) -> None:
    """Each test starts with empty scripts and request logs on the providers it uses."""
    for name in ("primary", "secondary"):
        if name in request.fixturenames:
            request.getfixturevalue(name).reset()
