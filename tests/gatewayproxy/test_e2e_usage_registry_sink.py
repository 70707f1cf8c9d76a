"""The `registry` usage sink against the real registry ingestion endpoint (daphne on loopback): model
requests arrive once each, MCP requests are skipped, and a replayed batch adds nothing."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest

from fakes.waiting import wait_until
from gatewayproxy.plugins.sinks.registry import RegistryOptions, RegistrySink
from gatewayproxy.server.upstream import UpstreamPool
from registry.internal.models import UsageRecord
from tests.support.gateway.documents import with_mcp_route
from tests.support.gateway.provider import FakeProvider
from tests.support.gateway.sinks import HI, sink_document
from tests.support.gateway.thread import GatewayFactory
from tests.support.live import live_registry
from tests.support.mcp_servers import RecordingMcpServer
from tests.support.serving import serving

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
INITIALIZE = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}


def stored(request_ids: list[str]) -> list[UsageRecord]:
    return list(UsageRecord.objects.filter(request_id__in=request_ids))


async def replay(options: RegistryOptions, records: list[dict[str, Any]]) -> None:
    pool = UpstreamPool()
    try:
        await RegistrySink(pool, options).write(records)
    finally:
        pool.close()


def test_registry_sink_posts_model_usage_and_skips_mcp(
    gateway_factory: GatewayFactory,
    tmp_path: Path,
    primary: FakeProvider,
    secondary: FakeProvider,
    capsys: pytest.CaptureFixture[str],
) -> None:
    token = tmp_path / "service-token"
    token.write_text("internal-service-token\n")
    with (
        serving(RecordingMcpServer().start()) as mcp,
        live_registry(REGISTRY_INTERNAL_TOKEN_FILE=str(token)) as registry_url,
    ):
        sink = {
            "name": "registry",
            "kind": "registry",
            "base_url": registry_url,
            "bearer_token_file": str(token),
            "flush_interval_ms": 0,
        }
        usage_sinks = [sink, {"name": "out", "kind": "stdout", "flush_interval_ms": 0}]
        document = sink_document(
            tmp_path, primary, secondary, secrets={"notes": "mcp-token"}, plugins={"usage_sinks": usage_sinks}
        )
        gateway = gateway_factory(with_mcp_route(document, mcp.url, "keys", "notes"))
        message = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INITIALIZE}
        tool_call = httpx.post(
            f"{gateway.url}/v1/mcp", json=message, headers={"accept": "application/json, text/event-stream"}
        )
        assert tool_call.status_code == 200
        model_ids = [
            httpx.post(f"{gateway.url}/v1/chat/completions", json={"model": model, "messages": HI}).headers[
                "x-request-id"
            ]
            for model in ("a-1", "b-1")
        ]
        rows = wait_until(lambda: len(found := stored(model_ids)) == 2 and found, what="the registry rows")
        gateway.stop()
        assert {row.request_id: (row.model, row.input_tokens) for row in rows} == {
            model_ids[0]: ("a-1", 11),
            model_ids[1]: ("b-1", 13),
        }
        assert stored([tool_call.headers["x-request-id"]]) == []
        assert f'"request_id":"{tool_call.headers["x-request-id"]}","ts"' in capsys.readouterr().out
        options = RegistryOptions(base_url=registry_url, bearer_token_file=str(token))
        asyncio.run(replay(options, [row.record for row in rows]))
        assert len(stored(model_ids)) == 2
        assert UsageRecord.objects.count() == 2
