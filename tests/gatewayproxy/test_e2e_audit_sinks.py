"""Audit records for admitted and refused requests (`file` sink), and the `ext_proc` audit sink with its
`failure_mode`: `deny` refuses traffic (503 `audit_unavailable`, refused by the `audit` stage) while the
processor fails, `allow` keeps serving."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from fakes.waiting import wait_until
from gatewayproxy.config.loader import ConfigError, validate_document
from gatewayproxy.metrics import GatewayMetrics
from gatewayproxy.pipeline.stages import SharedParts
from gatewayproxy.server.upstream import UpstreamPool
from gatewayproxy.state import build_state
from tests.support.gateway.callers import api_key_identity
from tests.support.gateway.provider import FakeProvider
from tests.support.gateway.sinks import HI, RecordingProcessor, jsonl, metric, sink_document
from tests.support.gateway.thread import GatewayThread

pytestmark = pytest.mark.e2e
KEYS = {"key-alice": ("alice", {"team": "red"})}
FIELDS = {
    "request_id",
    "ts",
    "kind",
    "principal",
    "route",
    "destination",
    "method",
    "path",
    "status",
    "outcome",
    "error_code",
    "refused_by",
    "latency_ms",
}


@pytest.fixture
def start_gateway(two_shape_gateway: Callable[..., GatewayThread], tmp_path: Path) -> Callable[..., GatewayThread]:
    """Starts a gateway (for the test) with these audit sinks, whose callers are `KEYS`."""
    identity = api_key_identity(tmp_path, KEYS)
    return lambda *audit_sinks: two_shape_gateway(identity=identity, plugins={"audit_sinks": list(audit_sinks)})


def ext_proc(processor: RecordingProcessor, **options: Any) -> dict[str, Any]:
    """The `ext_proc` audit sink `proc` posting to `processor`, flushing each record at once."""
    return {"name": "proc", "kind": "ext_proc", "url": processor.url, "flush_interval_ms": 0, **options}


@pytest.fixture
def processor() -> Iterator[RecordingProcessor]:
    with RecordingProcessor() as running:
        yield running


def chat(gateway: GatewayThread, key: str | None, model: str = "a-1") -> httpx.Response:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    return httpx.post(f"{gateway.url}/v1/chat/completions", json={"model": model, "messages": HI}, headers=headers)


def test_records_for_admitted_and_refused_requests(start_gateway: Callable[..., GatewayThread], tmp_path: Path) -> None:
    trail = tmp_path / "audit.jsonl"
    gateway = start_gateway(
        {"name": "trail", "kind": "file", "path": str(trail), "flush_interval_ms": 0}, {"name": "off", "kind": "noop"}
    )
    served, anonymous, unrouted = chat(gateway, "key-alice"), chat(gateway, None), chat(gateway, "key-alice", "z")
    records = wait_until(lambda: len(found := jsonl(trail)) == 3 and found, what="three audit records")
    by_id = {record["request_id"]: record for record in records}
    assert all(set(record) == FIELDS for record in records)
    admitted = by_id[served.headers["x-request-id"]]
    assert {
        key: admitted[key]
        for key in (
            "principal",
            "route",
            "destination",
            "status",
            "outcome",
            "error_code",
            "refused_by",
            "kind",
            "path",
        )
    } == {
        "principal": "alice",
        "route": "to_a",
        "destination": "shape_a",
        "status": 200,
        "outcome": "served",
        "error_code": None,
        "refused_by": None,
        "kind": "chat",
        "path": "/v1/chat/completions",
    }
    refused = by_id[anonymous.headers["x-request-id"]]
    assert (refused["status"], refused["outcome"], refused["error_code"], refused["principal"]) == (
        401,
        "refused",
        "unauthenticated",
        "anonymous",
    )
    no_route = by_id[unrouted.headers["x-request-id"]]
    assert (no_route["status"], no_route["outcome"], no_route["error_code"]) == (404, "refused", "no_route")


def test_deny_refuses_traffic_while_the_processor_fails(
    start_gateway: Callable[..., GatewayThread], tmp_path: Path, processor: RecordingProcessor
) -> None:
    trail = tmp_path / "audit.jsonl"
    gateway = start_gateway(
        ext_proc(processor, url=f"{processor.url}/audit"),
        {"name": "trail", "kind": "file", "path": str(trail), "flush_interval_ms": 0},
    )
    first = chat(gateway, "key-alice")
    wait_until(
        lambda: first.headers["x-request-id"] in {r["request_id"] for r in processor.records},
        what="the processor to receive the first record",
    )
    processor.failing = True
    assert chat(gateway, "key-alice").status_code == 200
    wait_until(
        lambda: metric(gateway.metrics_text, "gateway_sink_records_total", sink="proc", outcome="dropped") == 1,
        what="the failed batch counted",
    )
    refused = chat(gateway, "key-alice")
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "audit_unavailable"
    record = wait_until(
        lambda: next((r for r in jsonl(trail) if r["request_id"] == refused.headers["x-request-id"]), None),
        what="the refusal's record",
    )
    assert (record["refused_by"], record["error_code"], record["outcome"]) == (
        "audit",
        "audit_unavailable",
        "refused",
    )
    processor.failing = False
    wait_until(lambda: chat(gateway, "key-alice").status_code == 200, what="traffic to resume")


def test_allow_keeps_serving_while_the_processor_fails(
    start_gateway: Callable[..., GatewayThread], processor: RecordingProcessor
) -> None:
    processor.failing = True
    gateway = start_gateway(ext_proc(processor, failure_mode="allow"))
    assert chat(gateway, "key-alice").status_code == 200
    wait_until(
        lambda: metric(gateway.metrics_text, "gateway_sink_records_total", sink="proc", outcome="dropped") == 1,
        what="the failed batch counted",
    )
    assert [chat(gateway, "key-alice").status_code for _ in range(3)] == [200, 200, 200]


def test_a_rejected_batch_is_dropped_not_retried_forever(
    start_gateway: Callable[..., GatewayThread], tmp_path: Path, processor: RecordingProcessor
) -> None:
    """A 4xx says the batch itself is bad: it is counted as dropped instead of being spooled and replayed, so it
    cannot hold up the records behind it; a 429 is only a busy processor and is retried from the spool."""
    spool = {"directory": str(tmp_path / "spool"), "retry_interval_ms": 100}
    processor.refusing_with = 400
    gateway = start_gateway(ext_proc(processor, failure_mode="allow", spool=spool))
    assert chat(gateway, "key-alice").status_code == 200
    wait_until(
        lambda: metric(gateway.metrics_text, "gateway_sink_records_total", sink="proc", outcome="dropped") == 1,
        what="the rejected batch counted",
    )
    processor.refusing_with = 429
    assert chat(gateway, "key-alice").status_code == 200
    wait_until(
        lambda: metric(gateway.metrics_text, "gateway_sink_records_total", sink="proc", outcome="spooled") == 1,
        what="the throttled batch spooled",
    )
    processor.refusing_with = None
    wait_until(lambda: len(processor.records) == 1, what="the throttled batch replayed")
    assert chat(gateway, "key-alice").status_code == 200
    wait_until(lambda: len(processor.records) == 2, what="the next batch written")
    assert metric(gateway.metrics_text, "gateway_sink_records_total", sink="proc", outcome="dropped") == 1


def test_a_full_queue_overflows_to_the_spool_and_every_record_arrives_once(
    start_gateway: Callable[..., GatewayThread], tmp_path: Path, processor: RecordingProcessor
) -> None:
    """A sink slower than the traffic: what the queue cannot hold goes to the spool (the request does not wait) and
    is replayed once the sink keeps up; no record is lost or doubled."""
    processor.delay = 0.2
    spool = {"directory": str(tmp_path / "spool"), "retry_interval_ms": 100}
    gateway = start_gateway(ext_proc(processor, queue_size=2, batch_size=1, spool=spool))
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: chat(gateway, "key-alice"), range(12)))
    assert [answer.status_code for answer in answers] == [200] * 12
    assert metric(gateway.metrics_text, "gateway_sink_records_total", sink="proc", outcome="spooled") > 0
    processor.delay = 0.0
    wait_until(lambda: len(processor.records) >= 12, what="every record delivered")
    sent = sorted(answer.headers["x-request-id"] for answer in answers)
    assert sorted(record["request_id"] for record in processor.records) == sent


def test_a_bad_sink_option_fails_boot_naming_the_key(
    tmp_path: Path, primary: FakeProvider, secondary: FakeProvider
) -> None:
    document = sink_document(
        tmp_path,
        primary,
        secondary,
        plugins={"audit_sinks": [{"name": "trail", "kind": "file", "path": "x", "pth": "y"}]},
    )
    with pytest.raises(ConfigError) as raised:
        build_state(validate_document(document), UpstreamPool(), SharedParts(), GatewayMetrics())
    assert "plugins.audit_sinks[0].pth: unknown key" in str(raised.value)
