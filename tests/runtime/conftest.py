"""Fixtures of the runtime tests: a fake model and an MCP server on loopback, a live registry (daphne)
and `runsessions` workers as subprocesses on the pytest-django test database (the shared pieces are in
tests/support/runtime/fixtures.py and tests/support/processes.py).
"""

from __future__ import annotations

from tests.support.gateway.fixtures import gateway_factory
from tests.support.runtime.fixtures import (
    child_env,
    fake_model,
    model,
    open_session,
    registry,
    sdk,
    shop,
    shop_server,
    start_worker,
    worker_pool,
    workers,
)
from tests.support.sandbox_attacks import host_secret

__all__ = [
    "child_env",
    "fake_model",
    "gateway_factory",
    "host_secret",
    "model",
    "open_session",
    "registry",
    "sdk",
    "shop",
    "shop_server",
    "start_worker",
    "worker_pool",
    "workers",
]
