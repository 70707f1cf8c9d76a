"""Fixtures of the environment-worker tests: the plan model on loopback, a live registry whose work leases last
3 s, two `runsessions` workers with no sandbox of their own (the environment's worker runs the tools), and a
self-hosted environment with its key per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anthropic
import pytest

from fakes.plan_model import PlanModel
from tests.support.clients import registry_client
from tests.support.environment_workers import SelfHosted
from tests.support.processes import LiveRegistry, Process, child_environment, start_registry, start_runsessions
from tests.support.serving import served
from tests.support.tenants import make_tenant

LEASE_SECONDS = "3"


@pytest.fixture(scope="package")
def plan_model() -> Iterator[PlanModel]:
    yield from served(PlanModel())


@pytest.fixture(scope="package")
def child_env(django_db_setup: None, plan_model: PlanModel) -> dict[str, str]:
    return child_environment(plan_model.url, REGISTRY_WORK_LEASE_SECONDS=LEASE_SECONDS, REGISTRY_SANDBOX_BACKEND="none")


@pytest.fixture(scope="package")
def registry(child_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveRegistry]:
    live = start_registry(child_env, tmp_path_factory.mktemp("registry") / "daphne.log")
    yield live
    live.process.stop()


@pytest.fixture(scope="package")
def runtime_workers(child_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Process]]:
    directory = tmp_path_factory.mktemp("runtime")
    workers = [start_runsessions(child_env, directory / f"runsessions-{index}.log") for index in range(2)]
    yield workers
    for worker in workers:
        worker.stop()


@pytest.fixture
def sdk(registry: LiveRegistry, transactional_db: None) -> Iterator[anthropic.Anthropic]:
    client = registry_client(registry.url, make_tenant("workers").api_key)
    yield client
    client.close()


@pytest.fixture
def self_hosted(
    sdk: anthropic.Anthropic, registry: LiveRegistry, runtime_workers: list[Process], tmp_path: Path
) -> Iterator[SelfHosted]:
    environment = SelfHosted(sdk, registry.url, tmp_path, processes=[registry.process, *runtime_workers])
    yield environment
    environment.stop()
