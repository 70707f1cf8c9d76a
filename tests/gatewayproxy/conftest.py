"""Fixtures of the gateway tests: fake providers, an MCP upstream, and the factories that start gateways on
loopback (a module's `gateway` fixture is its config handed to one of them)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.gateway.fixtures import gateway_factory, module_gateway_factory
from tests.support.gateway.provider import FakeProvider
from tests.support.gateway.sinks import sink_document
from tests.support.gateway.thread import GatewayFactory, GatewayThread, vault_keys
from tests.support.mcp_servers import RecordingMcpServer
from tests.support.serving import served

__all__ = ["gateway_factory", "module_gateway_factory"]


@pytest.fixture(scope="session")
def primary() -> Iterator[FakeProvider]:
    """A provider named `primary`."""
    yield from served(FakeProvider("primary").start())


@pytest.fixture(scope="session")
def secondary() -> Iterator[FakeProvider]:
    """A provider named `secondary`."""
    yield from served(FakeProvider("secondary").start())


@pytest.fixture(scope="module")
def provider_keys() -> Iterator[None]:
    """Credentials `a` and `b` of the `keys` env vault (provider-a-key, provider-b-key), for one module."""
    with vault_keys(a="provider-a-key", b="provider-b-key"):
        yield


@pytest.fixture(scope="module")
def upstream() -> Iterator[RecordingMcpServer]:
    """An MCP server on loopback, one per test module."""
    yield from served(RecordingMcpServer().start())


@pytest.fixture
def two_shape_gateway(
    gateway_factory: GatewayFactory, tmp_path: Path, primary: FakeProvider, secondary: FakeProvider
) -> Callable[..., GatewayThread]:
    """Starts a gateway for one test with `a-*` models on `primary` (chat-shaped) and `b-*` on `secondary`
    (messages-shaped), keys in a static vault under `tmp_path` (`secrets=`: others or more); keyword arguments
    are more sections (the sinks, identity or spend under test)."""

    def start(*, secrets: dict[str, str] | None = None, **sections: Any) -> GatewayThread:
        return gateway_factory(sink_document(tmp_path, primary, secondary, secrets=secrets, **sections))

    return start


@pytest.fixture(autouse=True)
def _fresh_providers(request: pytest.FixtureRequest) -> None:
    """Each test starts with empty scripts and request logs on the providers it uses."""
    for name in ("primary", "secondary"):
        if name in request.fixturenames:
            request.getfixturevalue(name).reset()
