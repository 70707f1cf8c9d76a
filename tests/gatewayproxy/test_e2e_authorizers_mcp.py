"""Authorizers and payload guardrails on MCP traffic: the authorizer sees the JSON-RPC method and the tool's name;
guardrails judge a `tools/call`'s arguments (`tool_call`) and its result (`tool_result`) before it is relayed."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import yaml

from tests.support.gateway.callers import write_identity
from tests.support.gateway.documents import fallback_route, file_vault
from tests.support.gateway.thread import GatewayFactory, GatewayThread
from tests.support.mcp_servers import RecordingMcpServer

pytestmark = pytest.mark.e2e
ACCEPT = "application/json, text/event-stream"
INITIALIZE = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}
GUARDRAILS = [
    {"name": "redact-phone", "kind": "pii_regex", "builtins": ["phone"], "action": "redact", "phases": ["tool_call"]},
    {"name": "no-email", "kind": "pii_regex", "builtins": ["email"], "phases": ["tool_call"]},
    {
        "name": "no-secrets-out",
        "kind": "pii_regex",
        "builtins": [],
        "patterns": {"secret": "top secret"},
        "phases": ["tool_result"],
    },
]


@pytest.fixture(scope="module")
def gateway(
    module_gateway_factory: GatewayFactory, tmp_path_factory: pytest.TempPathFactory, upstream: RecordingMcpServer
) -> GatewayThread:
    directory = tmp_path_factory.mktemp("mcp-governed")
    (directory / "vault.yaml").write_text(yaml.safe_dump({"notes": "mcp-token"}))
    (directory / "acl.yaml").write_text(
        yaml.safe_dump({"rules": [{"principal": "alice", "paths": ["/v1/mcp", "/v1/mcp/sse"], "mcp_tools": ["echo"]}]})
    )
    document = {
        "identity": write_identity(directory),
        "vaults": [file_vault(directory / "vault.yaml")],
        "destinations": {
            "notes": {"kind": "mcp", "url": upstream.url, "credentials": {"vault": "files", "credential_id": "notes"}}
        },
        "routes": [fallback_route("mcp", {"path": "/v1/mcp"}, "notes")],
        "plugins": {
            "authorizers": [{"name": "acl", "kind": "yaml_acl", "file": str(directory / "acl.yaml")}],
            "guardrails": GUARDRAILS,
        },
    }
    return module_gateway_factory(document)


def post(gateway: GatewayThread, key: str, message: dict, session: str | None = None) -> httpx.Response:
    headers = {"accept": ACCEPT, "authorization": f"Bearer {key}", **({"mcp-session-id": session} if session else {})}
    return httpx.post(f"{gateway.url}/v1/mcp", json=message, headers=headers)


def answer(response: httpx.Response) -> dict:
    """The JSON-RPC message of a JSON or event-stream response."""
    if response.headers["content-type"].startswith("text/event-stream"):
        data = [line.removeprefix("data: ") for line in response.text.splitlines() if line.startswith("data: ")]
        return dict(json.loads(data[-1]))
    return dict(response.json())


@pytest.fixture(scope="module")
def session(gateway: GatewayThread) -> str:
    """An initialized MCP session of alice."""
    opened = post(gateway, "key-alice", {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INITIALIZE})
    assert opened.status_code == 200
    session_id = opened.headers["mcp-session-id"]
    post(gateway, "key-alice", {"jsonrpc": "2.0", "method": "notifications/initialized"}, session_id)
    return session_id


def call_tool(gateway: GatewayThread, session: str, tool: str, arguments: dict[str, Any]) -> httpx.Response:
    message = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}
    return post(gateway, "key-alice", message, session)


def test_an_allowed_tool_is_served(gateway: GatewayThread, session: str) -> None:
    response = call_tool(gateway, session, "echo", {"text": "hello"})
    assert response.status_code == 200
    assert answer(response)["result"]["content"][0]["text"] == "echo: hello"


def test_the_authorizer_sees_the_tool_name(gateway: GatewayThread, session: str) -> None:
    listed = post(gateway, "key-alice", {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, session)
    denied = call_tool(gateway, session, "add", {"a": 1, "b": 2})
    assert listed.status_code == 200  # a method without a tool is not restricted by `mcp_tools`
    assert denied.status_code == 403
    error = denied.json()
    assert error["id"] == 7 and error["error"]["data"] == {"code": "forbidden"}
    assert "tool 'add' is not allowed" in error["error"]["message"]


def test_a_caller_without_a_rule_is_denied(gateway: GatewayThread) -> None:
    response = post(gateway, "key-carol", {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INITIALIZE})
    assert response.status_code == 403 and response.json()["error"]["data"] == {"code": "forbidden"}


def test_tool_call_arguments_are_blocked_or_redacted(gateway: GatewayThread, session: str) -> None:
    blocked = call_tool(gateway, session, "echo", {"text": "mail eve@example.com"})
    redacted = call_tool(gateway, session, "echo", {"text": "call 415-555-0100"})
    assert blocked.status_code == 400 and blocked.json()["error"]["data"] == {"code": "guardrail_blocked_input"}
    assert redacted.status_code == 200
    assert answer(redacted)["result"]["content"][0]["text"] == "echo: call [REDACTED:phone]"


def test_a_tool_result_is_judged_before_it_is_relayed(gateway: GatewayThread, session: str) -> None:
    response = call_tool(gateway, session, "echo", {"text": "the top secret plan"})
    assert response.status_code == 400
    error = response.json()
    assert error["id"] == 7 and error["error"]["data"] == {"code": "guardrail_blocked_output"}
    assert "top secret" not in response.text.replace("'no-secrets-out'", "")
    assert "echo:" not in response.text


def test_a_batch_cannot_slip_past_the_stages(gateway: GatewayThread, session: str) -> None:
    batch = [{"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"name": "add", "arguments": {}}}]
    response = httpx.post(
        f"{gateway.url}/v1/mcp",
        json=batch,
        headers={"accept": ACCEPT, "authorization": "Bearer key-alice", "mcp-session-id": session},
    )
    assert response.status_code == 400 and response.json()["error"]["data"] == {"code": "invalid_request"}


def test_the_sse_transport_is_governed_like_streamable_http(gateway: GatewayThread) -> None:
    """On `/v1/mcp/sse` a refused message is answered on the event stream, where the client waits for it."""
    headers = {"authorization": "Bearer key-alice", "accept": "text/event-stream"}
    with httpx.stream("GET", f"{gateway.url}/v1/mcp/sse", headers=headers) as stream:
        events = (line.removeprefix("data: ") for line in stream.iter_lines() if line.startswith("data: "))
        endpoint = f"{gateway.url}{next(events)}"

        def send(message: dict[str, Any]) -> dict[str, Any]:
            accepted = httpx.post(endpoint, json=message, headers={"authorization": "Bearer key-alice"})
            assert accepted.status_code == 202
            return dict(json.loads(next(events))) if "id" in message else {}

        assert send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INITIALIZE})["result"]
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        tool = {"jsonrpc": "2.0", "method": "tools/call"}
        denied = send({**tool, "id": 2, "params": {"name": "add", "arguments": {"a": 1, "b": 2}}})
        blocked_in = send({**tool, "id": 3, "params": {"name": "echo", "arguments": {"text": "mail a@b.example"}}})
        blocked_out = send({**tool, "id": 4, "params": {"name": "echo", "arguments": {"text": "the top secret"}}})
        served = send({**tool, "id": 5, "params": {"name": "echo", "arguments": {"text": "hello"}}})
    assert denied["id"] == 2 and denied["error"]["data"] == {"code": "forbidden"}
    assert blocked_in["id"] == 3 and blocked_in["error"]["data"] == {"code": "guardrail_blocked_input"}
    assert blocked_out["id"] == 4 and blocked_out["error"]["data"] == {"code": "guardrail_blocked_output"}
    assert "top secret" not in json.dumps(blocked_out)
    assert served["result"]["content"][0]["text"] == "echo: hello"
