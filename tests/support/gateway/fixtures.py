"""The gateway factory fixtures, shared by every package that starts gateways in a thread (a conftest imports
them): `gateway_factory` for one test, `module_gateway_factory` for a module's `gateway` fixture."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.gateway.thread import GatewayFactory
from tests.support.serving import served


@pytest.fixture
def gateway_factory() -> Iterator[GatewayFactory]:
    """Starts gateways for one test: `gateway_factory(document, base_dir=...)`; all stopped at its end."""
    yield from served(GatewayFactory())


@pytest.fixture(scope="module")
def module_gateway_factory() -> Iterator[GatewayFactory]:
    """Starts gateways shared by a module's tests (its `gateway` fixture); all stopped at the module's end."""
    yield from served(GatewayFactory())
