"""End to end through `manage.py rungateway`: boot failures, graceful SIGTERM drain, and worker processes."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from django.core.management import CommandError, call_command

from fakes.waiting import wait_until
from tests.support.gateway.provider import FakeProvider
from tests.support.gateway.thread import wait_ready
from tests.support.live import free_port, rungateway

pytestmark = pytest.mark.e2e
PROJECT = Path(__file__).resolve().parents[2]
HI = [{"role": "user", "content": "hi"}]


def write_config(directory: Path, document: dict[str, Any]) -> Path:
    path = directory / "gateway.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def base_document(provider: FakeProvider) -> dict[str, Any]:
    return {
        "server": {
            "listen": f"127.0.0.1:{free_port()}",
            "admin_listen": f"127.0.0.1:{free_port()}",
            "limits": {"drain_timeout_ms": 5000},
        },
        "vaults": [{"name": "v", "resolver": "env", "env_var": "PATH"}],
        "destinations": {"one": {"kind": "vendor_a", "base_url": f"{provider.url}/v1", "credentials": {"vault": "v"}}},
        "routes": [{"name": "all", "strategy": {"mode": "fallback", "targets": [{"destination": "one"}]}}],
    }


@pytest.fixture
def started(
    tmp_path: Path, primary: FakeProvider, request: pytest.FixtureRequest
) -> Iterator[tuple[subprocess.Popen[str], dict[str, Any]]]:
    document = base_document(primary)
    process = rungateway(write_config(tmp_path, document), *getattr(request, "param", ()))
    wait_ready(f"http://{document['server']['admin_listen']}", process)
    yield process, document
    if process.poll() is None:
        process.kill()
    process.communicate()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"surprise": {}}, "surprise: unknown key"),
        (
            {"plugins": {"guardrails": [{"name": "g", "kind": "openai_moderation"}]}},
            "available kinds: pii_regex, llm_evaluator, ext_proc",
        ),
        ({"vaults": [{"name": "v", "resolver": "static_file", "file": "missing.yaml"}]}, "vaults[0].file: cannot read"),
    ],
)
def test_boot_fails_naming_the_problem(
    tmp_path: Path, primary: FakeProvider, change: dict[str, Any], message: str
) -> None:
    with pytest.raises(CommandError) as raised:
        call_command("rungateway", config=str(write_config(tmp_path, {**base_document(primary), **change})))
    assert message in str(raised.value)


def test_sigterm_drains_in_flight_requests(
    started: tuple[subprocess.Popen[str], dict[str, Any]], primary: FakeProvider
) -> None:
    process, document = started
    primary.reset("delay:1.0")
    results: list[httpx.Response] = []
    url = f"http://{document['server']['listen']}/v1/chat/completions"
    worker = threading.Thread(
        target=lambda: results.append(httpx.post(url, json={"model": "m", "messages": HI}, timeout=10))
    )
    worker.start()
    wait_until(lambda: primary.received, what="the request to reach the provider")
    process.send_signal(signal.SIGTERM)

    def refused() -> bool:
        try:
            httpx.post(url, json={"model": "m", "messages": HI})
        except httpx.ConnectError:
            return True
        return False

    wait_until(refused, timeout=5, what="the draining gateway to stop accepting connections")
    worker.join()
    assert process.wait(timeout=10) == 0
    assert results[0].status_code == 200 and results[0].json()["choices"][0]["message"]["content"]


@pytest.mark.parametrize("started", [("--workers", "2")], indirect=True)
def test_workers_share_the_port(started: tuple[subprocess.Popen[str], dict[str, Any]]) -> None:
    process, document = started
    children = Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()
    assert len(children) == 2
    url = f"http://{document['server']['listen']}/v1/chat/completions"
    statuses = {httpx.post(url, json={"model": "m", "messages": HI}).status_code for _ in range(10)}
    assert statuses == {200}
    os.kill(process.pid, signal.SIGTERM)
    assert process.wait(timeout=15) == 0
