"""The `kafka` sink without a broker (none runs here): JSON and Avro serialization (Avro schema registered at a
loopback schema registry, schema-registry wire format), and records spooled while the broker is unreachable."""

from __future__ import annotations

import asyncio
import io
import json
import struct
from collections.abc import Callable
from pathlib import Path

import fastavro
import httpx
import pytest

from fakes.waiting import wait_until
from gatewayproxy.pipeline.usage import AVRO_SCHEMA
from gatewayproxy.plugins.sinks.kafka import AvroEncoding, JsonEncoding
from gatewayproxy.plugins.sinks.kafka_options import SchemaRegistry
from gatewayproxy.server.upstream import UpstreamPool
from tests.support.gateway.sinks import CHAT_USAGE, HI, RecordingProcessor, metric
from tests.support.gateway.thread import GatewayThread
from tests.support.live import free_port

pytestmark = pytest.mark.e2e
RECORD = {
    "request_id": "req_1",
    "ts": "2030-01-01T00:00:00.000+00:00",
    "kind": "chat",
    "principal": "alice",
    "scope": {"team": "red"},
    "route": "r",
    "destination": "d",
    "provider": "vendor_a",
    "model": None,
    **CHAT_USAGE,
    "latency_ms": 1.5,
    "streamed": False,
    "tags": {},
}


def test_json_encoding() -> None:
    assert json.loads(JsonEncoding().encode(RECORD)) == RECORD


def test_avro_encoding_registers_the_schema_and_uses_the_wire_format() -> None:
    async def encode(registry_url: str) -> bytes:
        pool = UpstreamPool()
        encoding = AvroEncoding(pool, SchemaRegistry(url=registry_url), "usage-value", AVRO_SCHEMA)
        try:
            await encoding.ready()
            await encoding.ready()
            return encoding.encode(RECORD)
        finally:
            pool.close()

    with RecordingProcessor(answer={"id": 42}) as registry:
        value = asyncio.run(encode(registry.url))
        assert len(registry.bodies) == 1
        assert json.loads(registry.bodies[0]["schema"])["name"] == "UsageRecord"
    assert value[:5] == b"\x00" + struct.pack(">I", 42)
    decoded = fastavro.schemaless_reader(io.BytesIO(value[5:]), fastavro.parse_schema(AVRO_SCHEMA))
    assert decoded == {**RECORD, "cache_hit": False, "partial": False}  # the schema's defaults, absent from it


def test_unreachable_broker_spools(two_shape_gateway: Callable[..., GatewayThread], tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    sink = {
        "name": "stream",
        "kind": "kafka",
        "bootstrap_servers": [f"127.0.0.1:{free_port()}"],
        "topic": "usage",
        "flush_interval_ms": 0,
        "write_timeout_ms": 1000,
        "spool": {"directory": str(spool), "retry_interval_ms": 60000},
    }
    gateway = two_shape_gateway(plugins={"usage_sinks": [sink]})
    sent = [
        httpx.post(f"{gateway.url}/v1/chat/completions", json={"model": "a-1", "messages": HI}).headers["x-request-id"]
        for _ in range(3)
    ]
    wait_until(
        lambda: metric(gateway.metrics_text, "gateway_sink_records_total", sink="stream", outcome="spooled") == 3,
        what="the records spooled",
    )
    gateway.stop()
    spooled = [json.loads(line) for path in spool.glob("*.jsonl") for line in path.read_text().splitlines()]
    assert sorted(record["request_id"] for record in spooled) == sorted(sent)
