"""Fixtures of the multi-agent tests: the plan model on loopback (each thread's input is its plan), a live
registry, two `runsessions` workers with sandboxes, and agents with a `multiagent` roster."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import pytest

from fakes.plan_model import PlanModel
from tests.support.processes import LiveRegistry
from tests.support.runtime.fixtures import registry, sandboxed_environment, sdk, start_worker, worker_pool, workers
from tests.support.runtime.sessions import MODEL, Conversation, WorkerPool
from tests.support.serving import served

__all__ = ["registry", "sdk", "start_worker", "worker_pool", "workers"]

TOOLSET: Any = {"type": "agent_toolset_20260401"}
MAX_THREADS = 6


@pytest.fixture(scope="package")
def plan_model() -> Iterator[PlanModel]:
    yield from served(PlanModel())


@pytest.fixture(scope="package")
def child_env(django_db_setup: None, plan_model: PlanModel) -> Iterator[dict[str, str]]:
    yield from sandboxed_environment(plan_model.url, "thread-sandboxes", REGISTRY_SESSION_MAX_THREADS=str(MAX_THREADS))


@pytest.fixture
def team(sdk: anthropic.Anthropic, registry: LiveRegistry, workers: WorkerPool) -> Callable[..., Conversation]:
    """A session of an orchestrator whose roster is `researcher` and `writer` (both with the built-in tools);
    keyword arguments replace members of its `multiagent`, set the session's `budget` or add agent fields."""

    def open_team(**overrides: Any) -> Conversation:
        researcher = sdk.beta.agents.create(name="researcher", model=MODEL, description="finds", tools=[TOOLSET])
        writer = sdk.beta.agents.create(name="writer", model=MODEL, description="writes", tools=[TOOLSET])
        multiagent: dict[str, Any] = {
            "type": "multiagent_20261001",
            "subagents": {"type": "enabled", "predefined_agents": [researcher.id, writer.id]},
            **{key: overrides.pop(key) for key in ("subagents", "advisor") if key in overrides},
        }
        session_fields = {"budget": overrides.pop("budget")} if "budget" in overrides else {}
        fields: dict[str, Any] = {"tools": [TOOLSET], **overrides}
        boss = sdk.beta.agents.create(name="boss", model=MODEL, multiagent=multiagent, **fields)  # type: ignore[arg-type]
        environment = sdk.beta.environments.create(name="env")
        session = sdk.beta.sessions.create(agent=boss.id, environment_id=environment.id, **session_fields)
        return Conversation(sdk=sdk, session_id=session.id, processes=[registry.process, *workers.processes])

    return open_team
