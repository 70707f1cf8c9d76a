"""Fixtures of the webhook event tests: the API clients of tests/conftest.py for the changes the API makes, and
for those the runtime makes a live registry and `runsessions` workers with the fake model (the runtime tests'
fixtures, with their `open_session`, and the multi-agent tests' `team`)."""

from __future__ import annotations

from tests.registry.conftest import refusing_url
from tests.runtime.conftest import open_session
from tests.support.runtime.fixtures import (
    child_env,
    fake_model,
    model,
    registry,
    sdk,
    shop,
    shop_server,
    worker_pool,
    workers,
)
from tests.threads.conftest import team

__all__ = [
    "child_env",
    "fake_model",
    "model",
    "open_session",
    "refusing_url",
    "registry",
    "sdk",
    "shop",
    "shop_server",
    "team",
    "worker_pool",
    "workers",
]
