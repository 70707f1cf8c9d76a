"""Fixtures of the multi-agent tests: the plan model on loopback (each thread's input is its plan), a live
registry, two `runsessions` workers with sandboxes, and agents with a `multiagent` roster."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fakes.plan_model import PlanModel
from tests.support.runtime.fixtures import (
    registry,
    sandboxed_environment,
    sdk,
    start_worker,
    team,
    worker_pool,
    workers,
)
from tests.support.serving import served

__all__ = ["registry", "sdk", "start_worker", "team", "worker_pool", "workers"]

MAX_THREADS = 6


@pytest.fixture(scope="package")
def plan_model() -> Iterator[PlanModel]:
    yield from served(PlanModel())


@pytest.fixture(scope="package")
def child_env(django_db_setup: None, plan_model: PlanModel) -> Iterator[dict[str, str]]:
    yield from sandboxed_environment(plan_model.url, "thread-sandboxes", REGISTRY_SESSION_MAX_THREADS=str(MAX_THREADS))
