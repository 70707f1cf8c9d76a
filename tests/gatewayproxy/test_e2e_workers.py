"""`rungateway --workers 2`: one `/metrics` scrape sums every worker's requests, MCP-over-SSE messages reach the
stream whichever worker accepts their POST, and the local limiter says at boot that its limits are per process.

SO_REUSEPORT spreads connections over the workers by a hash of the client's address and port, so every request
and scrape here goes on a fresh connection: the chance that N of them all land on one worker is 2^-(N-1)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.support.gateway.callers import api_key_identity
from tests.support.gateway.documents import destination, fallback_route, file_vault, with_mcp_route
from tests.support.gateway.provider import FakeProvider
from tests.support.gateway.sinks import metric
from tests.support.gateway.thread import wait_ready
from tests.support.live import free_port, rungateway
from tests.support.mcp_servers import RecordingMcpServer

pytestmark = pytest.mark.e2e
HI = [{"role": "user", "content": "hi"}]
INITIALIZE = {"protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}
REQUESTS = 40


@pytest.fixture(scope="module")
def workers(
    tmp_path_factory: pytest.TempPathFactory, primary: FakeProvider, upstream: RecordingMcpServer
) -> Iterator[tuple[dict[str, Any], subprocess.Popen[str]]]:
    directory = tmp_path_factory.mktemp("workers")
    (directory / "vault.yaml").write_text(yaml.safe_dump({"notes": "mcp-token", "model": "model-key"}))
    document: dict[str, Any] = {
        "server": {"listen": f"127.0.0.1:{free_port()}", "admin_listen": f"127.0.0.1:{free_port()}"},
        "identity": api_key_identity(directory, {"key-alice": ("alice", {"team": "red"})}, relative=True),
        "vaults": [file_vault("vault.yaml")],
        "destinations": {"one": destination("vendor_a", f"{primary.url}/v1", "files", "model")},
        "routes": [fallback_route("all", None, "one")],
        "rate_limits": [{"name": "generous", "qpm": 100000}],
    }
    with_mcp_route(document, upstream.url, "files", "notes")
    config = directory / "gateway.yaml"
    config.write_text(yaml.safe_dump(document))
    process = rungateway(config, "--workers", "2")
    wait_ready(f"http://{document['server']['admin_listen']}", process)
    yield document, process
    os.kill(process.pid, signal.SIGTERM)
    output = process.communicate(timeout=20)[0]
    assert process.returncode == 0, output
    assert output.count("rate_limits are counted per worker process") == 1, output


def fresh(method: str, url: str, **kwargs: Any) -> httpx.Response:
    """One request on its own connection."""
    with httpx.Client() as client:
        return client.request(method, url, **kwargs)


def test_one_scrape_sums_every_worker(workers: tuple[dict[str, Any], subprocess.Popen[str]]) -> None:
    document, process = workers
    assert len(Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()) == 2
    data, admin = f"http://{document['server']['listen']}", f"http://{document['server']['admin_listen']}"
    before = metric(fresh("GET", f"{admin}/metrics").text, "gateway_requests_total", route="all", status="200")
    auth = {"authorization": "Bearer key-alice"}
    for _ in range(REQUESTS):
        response = fresh("POST", f"{data}/v1/chat/completions", json={"model": "m", "messages": HI}, headers=auth)
        assert response.status_code == 200
    scrapes = [fresh("GET", f"{admin}/metrics").text for _ in range(8)]
    totals = {metric(text, "gateway_requests_total", route="all", status="200") - before for text in scrapes}
    assert totals == {REQUESTS}
    assert {metric(text, "gateway_in_flight_requests") for text in scrapes} == {0}


def test_sse_messages_reach_the_stream_from_any_worker(workers: tuple[dict[str, Any], subprocess.Popen[str]]) -> None:
    document, _ = workers
    data, admin = f"http://{document['server']['listen']}", f"http://{document['server']['admin_listen']}"
    auth = {"authorization": "Bearer key-alice"}
    forwarded_before = metric(fresh("GET", f"{admin}/metrics").text, "gateway_mcp_sse_forwarded_total")
    with httpx.stream("GET", f"{data}/v1/mcp/sse", headers={**auth, "accept": "text/event-stream"}) as stream:
        lines = stream.iter_lines()
        endpoint = next(line for line in lines if line.startswith("data: ")).removeprefix("data: ")
        messages = [
            {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INITIALIZE},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            *({"jsonrpc": "2.0", "id": rpc_id, "method": "tools/list"} for rpc_id in range(2, 14)),
        ]
        for message in messages:
            assert fresh("POST", f"{data}{endpoint}", json=message, headers=auth).status_code == 202
        answers: list[dict[str, Any]] = []
        while len(answers) < 13:
            line = next(lines)
            if line.startswith("data: "):
                answers.append(json.loads(line.removeprefix("data: ")))
        stranger = fresh("POST", f"{data}{endpoint}", json=messages[2], headers={"authorization": "Bearer nope"})
        assert stranger.status_code == 401
    assert sorted(answer["id"] for answer in answers) == list(range(1, 14))
    assert all("tools" in answer["result"] for answer in answers if answer["id"] > 1)
    forwarded = metric(fresh("GET", f"{admin}/metrics").text, "gateway_mcp_sse_forwarded_total") - forwarded_before
    assert forwarded > 0  # some POSTs landed on the worker not holding the stream
