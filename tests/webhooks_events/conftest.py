"""Fixtures of the webhook event tests: the API clients of tests/conftest.py for the changes the API makes, and
for those the runtime makes a live registry and `runsessions` workers with the fake model (the runtime tests'
fixtures, with their `open_session`, and the multi-agent tests' `team`)."""

from __future__ import annotations

from tests.support.runtime.fixtures import (
    child_env,
    fake_model,
    model,
    open_session,
    registry,
    sdk,
    shop,
    shop_server,
    team,
    worker_pool,
    workers,
)
from tests.support.serving import refusing_url
from tests.support.webhook_delivery import every_event_delivered

__all__ = [
    "child_env",
    "every_event_delivered",
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
