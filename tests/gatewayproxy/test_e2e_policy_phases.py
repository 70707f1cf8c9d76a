"""Policy guardrails at the other phases: `tool_call` and `tool_result` on MCP `tools/call` through a real MCP
server, `llm_response` on a model answer, and phases left out of `guardrails_policy.phases`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.gateway.documents import with_mcp_route
from tests.support.gateway.policy import bundle, chat, error_code, gateway_document, rule
from tests.support.gateway.provider import FakeProvider
from tests.support.gateway.thread import GatewayFactory, GatewayThread
from tests.support.mcp_servers import RecordingMcpServer

pytestmark = pytest.mark.e2e
ACCEPT = "application/json, text/event-stream"
INITIALIZE = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}
RULES = (
    rule("tool_denylist", {"tools": ["add"]}),
    rule("blocked_terms", {"terms": ["forbidden"]}),
    rule("model_allowlist", {"models": ["m"]}),
)


def running(
    gateway_factory: GatewayFactory,
    provider: FakeProvider,
    mcp: RecordingMcpServer,
    tmp_path: Path,
    rules: tuple[dict[str, Any], ...] = RULES,
    expires_in: float = 900,
    **policy: Any,
) -> GatewayThread:
    path = tmp_path / "bundle.json"
    path.write_text(json.dumps(bundle(1, *rules, expires_in=expires_in)))
    document = gateway_document(
        provider,
        guardrail_source={"kind": "file", "path": str(path), "verification": {"allow_unsigned": True}},
        guardrails_policy={"mode": "enforce", **policy},
    )
    return gateway_factory(with_mcp_route(document, mcp.url, "static"))


def call(gateway: GatewayThread, method: str, params: dict[str, Any], session: str | None = None) -> httpx.Response:
    headers = {"accept": ACCEPT, **({"mcp-session-id": session} if session else {})}
    return httpx.post(
        f"{gateway.url}/v1/mcp",
        headers=headers,
        timeout=10,
        json={"jsonrpc": "2.0", "id": 7, "method": method, "params": params},
    )


def tool(gateway: GatewayThread, name: str, arguments: dict[str, Any]) -> httpx.Response:
    session = call(gateway, "initialize", INITIALIZE).headers["mcp-session-id"]
    return call(gateway, "tools/call", {"name": name, "arguments": arguments}, session)


def test_tool_calls_and_results_are_judged(
    gateway_factory: GatewayFactory, primary: FakeProvider, upstream: RecordingMcpServer, tmp_path: Path
) -> None:
    gateway = running(gateway_factory, primary, upstream, tmp_path)
    assert "echo: hello" in tool(gateway, "echo", {"text": "hello"}).text
    denied = tool(gateway, "add", {"a": 1, "b": 2})
    assert denied.status_code == 403 and "'add' is denied" in denied.text
    assert tool(gateway, "echo", {"text": "forbidden"}).status_code == 403  # the call's arguments
    metrics = gateway.metrics_text
    assert 'gateway_policy_decisions_total{outcome="deny",phase="tool_call"} 2.0' in metrics
    assert 'gateway_policy_decisions_total{outcome="allow",phase="tool_result"} 1.0' in metrics


def test_left_out_phases_are_not_judged(
    gateway_factory: GatewayFactory, primary: FakeProvider, upstream: RecordingMcpServer, tmp_path: Path
) -> None:
    gateway = running(gateway_factory, primary, upstream, tmp_path, phases=["llm_request"])
    assert "3" in tool(gateway, "add", {"a": 1, "b": 2}).text
    assert error_code(chat(gateway, "other")) == "policy_guardrail_denied"


def test_model_answers_are_judged(
    gateway_factory: GatewayFactory, primary: FakeProvider, upstream: RecordingMcpServer, tmp_path: Path
) -> None:
    provider_answer = rule("blocked_terms", {"terms": ["from primary"]}, phases=["llm_response"])
    gateway = running(gateway_factory, primary, upstream, tmp_path, rules=(provider_answer,))
    assert error_code(chat(gateway, "m")) == "policy_guardrail_denied"
    assert 'gateway_policy_decisions_total{outcome="deny",phase="llm_response"} 1.0' in gateway.metrics_text


def test_an_expired_bundle_denies_tool_calls_unless_allowed(
    gateway_factory: GatewayFactory, primary: FakeProvider, upstream: RecordingMcpServer, tmp_path: Path
) -> None:
    soft = running(gateway_factory, primary, upstream, tmp_path, rules=(), expires_in=-120, max_staleness_secs=60)
    assert chat(soft, "m").status_code == 200  # soft_allow_with_alert at llm_request
    assert tool(soft, "echo", {"text": "hello"}).status_code == 403  # but not at tool_call
    soft.stop()
    allowing = running(
        gateway_factory,
        primary,
        upstream,
        tmp_path,
        rules=(),
        expires_in=-120,
        max_staleness_secs=60,
        on_expired="allow",
    )
    assert "echo: hello" in tool(allowing, "echo", {"text": "hello"}).text
