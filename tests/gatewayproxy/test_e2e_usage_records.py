"""Usage records through a real gateway and the `stdout` sink: plain, streamed (no usage asked for) and
translated requests, tags from the allowlist, and no record for a request that never reached an upstream."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from tests.support.gateway.sinks import CHAT_USAGE, HI, StdoutRecords
from tests.support.gateway.thread import GatewayThread

pytestmark = pytest.mark.e2e


@pytest.fixture
def gateway(two_shape_gateway: Callable[..., GatewayThread]) -> GatewayThread:
    return two_shape_gateway(
        plugins={"usage_sinks": [{"name": "out", "kind": "stdout", "flush_interval_ms": 0}]},
        spend={"request_tag_allowlist": ["team", "Project"]},
    )


def test_plain_request_record(gateway: GatewayThread, capsys: pytest.CaptureFixture[str]) -> None:
    response = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        json={"model": "a-large", "messages": HI},
        headers={"x-gateway-tag-team": "red", "x-gateway-tag-unlisted": "no"},
    )
    assert response.status_code == 200
    record = StdoutRecords(capsys).of(response.headers["x-request-id"])
    expected = {
        "kind": "chat",
        "principal": "anonymous",
        "route": "to_a",
        "destination": "shape_a",
        "provider": "vendor_a",
        "model": "a-large",
        **CHAT_USAGE,
        "streamed": False,
        "tags": {"team": "red"},
        "scope": {},
    }
    assert {key: record[key] for key in expected} == expected
    assert record["latency_ms"] > 0 and record["ts"].endswith("+00:00")


def test_streamed_request_is_counted_without_asking_for_usage(
    gateway: GatewayThread, capsys: pytest.CaptureFixture[str]
) -> None:
    body = {"model": "a-large", "messages": HI, "stream": True, "metadata": {"project": "apollo", "x": "y"}}
    with httpx.stream("POST", f"{gateway.url}/v1/chat/completions", json=body) as response:
        events = response.read().decode()
    assert '"usage"' not in events
    record = StdoutRecords(capsys).of(response.headers["x-request-id"])
    assert (record["streamed"], record["input_tokens"], record["output_tokens"]) == (True, 11, 7)
    assert record["tags"] == {"Project": "apollo"}


def test_translated_request_record(gateway: GatewayThread, capsys: pytest.CaptureFixture[str]) -> None:
    response = httpx.post(f"{gateway.url}/v1/chat/completions", json={"model": "b-small", "messages": HI})
    assert response.status_code == 200 and response.json()["usage"]["prompt_tokens"] == 13
    record = StdoutRecords(capsys).of(response.headers["x-request-id"])
    assert (record["provider"], record["destination"], record["model"]) == ("vendor_b", "shape_b", "b-small")
    assert (record["input_tokens"], record["output_tokens"], record["kind"]) == (13, 5, "chat")


def test_refused_request_has_no_usage_record(gateway: GatewayThread, capsys: pytest.CaptureFixture[str]) -> None:
    refused = httpx.post(f"{gateway.url}/v1/chat/completions", json={"model": "unrouted", "messages": HI})
    served = httpx.post(f"{gateway.url}/v1/chat/completions", json={"model": "a-large", "messages": HI})
    assert refused.status_code == 404
    records = StdoutRecords(capsys)
    records.of(served.headers["x-request-id"])
    assert refused.headers["x-request-id"] not in {record["request_id"] for record in records.lines}
