"""Two gateway processes (`manage.py rungateway`) sharing one Redis hold one limit between them exactly."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator

import httpx
import pytest
import yaml

from tests.support.gateway.limits import CHAT, document, redis_limiter
from tests.support.gateway.provider import FakeProvider
from tests.support.gateway.thread import wait_ready
from tests.support.live import free_port, rungateway

pytestmark = pytest.mark.e2e
SHARED_REDIS = "redis://127.0.0.1:6379/0"
QPM = 5


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory, primary: FakeProvider) -> Iterator[list[str]]:
    """Two processes on one config (a `redis_window` limiter with its own key prefix); yields their data URLs."""
    limits = [
        {"name": "requests", "match": {"scope": {"team": "r"}}, "qpm": QPM},
        {"name": "spend", "match": {"scope": {"team": "s"}}, "budget_usd_per_month": 1.5},
    ]
    config = document(
        primary,
        rate_limits=limits,
        plugins=redis_limiter(SHARED_REDIS),
        pricing={"input_per_1m": 1.0, "output_per_1m": 1000.0},
        spend={"admission": {"default_max_output_tokens": 1000}},
    )
    processes: list[subprocess.Popen[str]] = []
    urls = []
    for index in range(2):
        listen, admin = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
        path = tmp_path_factory.mktemp("replicas") / f"gateway-{index}.yaml"
        path.write_text(yaml.safe_dump({**config, "server": {"listen": listen, "admin_listen": admin}}))
        processes.append(rungateway(path))
        urls.append((f"http://{listen}", f"http://{admin}"))
    try:
        for process, (_, admin) in zip(processes, urls, strict=True):
            wait_ready(admin, process)
        yield [data for data, _ in urls]
    finally:
        for process in processes:
            process.kill()
            process.communicate()


def test_a_qpm_limit_holds_across_two_processes_exactly(replicas: list[str]) -> None:
    statuses = [
        httpx.post(f"{replicas[index % 2]}/v1/chat/completions", json=CHAT, headers={"x-scope-team": "r"}).status_code
        for index in range(QPM * 2 + 2)
    ]
    assert statuses.count(200) == QPM and statuses.count(429) == QPM + 2
    assert statuses[:QPM] == [200] * QPM


def test_a_budget_race_across_two_processes_admits_one(replicas: list[str], primary: FakeProvider) -> None:
    primary.reset("delay:0.5")

    async def fire() -> list[int]:
        async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=50)) as client:
            responses = await asyncio.gather(
                *(
                    client.post(f"{replicas[index % 2]}/v1/chat/completions", json=CHAT, headers={"x-scope-team": "s"})
                    for index in range(50)
                )
            )
        return [response.status_code for response in responses]

    statuses = asyncio.run(fire())
    assert statuses.count(200) == 1 and statuses.count(429) == 49
