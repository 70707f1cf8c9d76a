"""Fixtures of the runtime tests: a fake model and an MCP server on loopback, a live registry (daphne)
and `runsessions` workers as subprocesses on the pytest-django test database (the shared pieces are in
tests/support/runtime/fixtures.py and tests/support/processes.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import anthropic
import pytest

from tests.support.gateway.fixtures import gateway_factory
from tests.support.processes import LiveRegistry
from tests.support.runtime.fixtures import (
    child_env,
    fake_model,
    model,
    registry,
    sdk,
    shop,
    shop_server,
    start_worker,
    worker_pool,
    workers,
)
from tests.support.runtime.sessions import MODEL, Conversation, WorkerPool
from tests.support.sandbox_attacks import host_secret

__all__ = [
    "child_env",
    "fake_model",
    "gateway_factory",
    "host_secret",
    "model",
    "registry",
    "sdk",
    "shop",
    "shop_server",
    "start_worker",
    "worker_pool",
    "workers",
]


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
