"""End to end MCP: the `mcp` SDK's Streamable HTTP client through the gateway to a stateful SDK server on
loopback (initialize, tools/list, tools/call, session id kept), vault credentials, session binding, errors."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import httpx2
import pytest
import yaml
from mcp import Client
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client

from fakes.waiting import wait_until
from tests.support.gateway.callers import api_key_identity
from tests.support.gateway.documents import fallback_route, file_vault, mcp_destination
from tests.support.gateway.thread import GatewayFactory, GatewayThread
from tests.support.mcp_servers import RecordingMcpServer

pytestmark = pytest.mark.e2e
ACCEPT = "application/json, text/event-stream"
INITIALIZE = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}


@pytest.fixture(scope="module")
def mcp_gateway(
    module_gateway_factory: GatewayFactory, tmp_path_factory: pytest.TempPathFactory, upstream: RecordingMcpServer
) -> GatewayThread:
    directory = tmp_path_factory.mktemp("mcp")
    callers = {"key-alice": ("alice", {"team": "red"}), "key-bob": ("bob", {"team": "red"}), "key-carol": ("carol", {})}
    (directory / "vault.yaml").write_text(yaml.safe_dump({"notes": "mcp-token"}))
    document = {
        "server": {"limits": {"drain_timeout_ms": 2000}},
        "identity": api_key_identity(directory, callers, relative=True),
        "vaults": [file_vault("vault.yaml")],
        "destinations": {"notes": mcp_destination(upstream.url, "files", "notes")},
        "routes": [fallback_route("mcp-red", {"path": "/v1/mcp", "scope": {"team": "red"}}, "notes")],
    }
    return module_gateway_factory(document, base_dir=directory)


async def sdk_session(url: str, key: str) -> dict[str, Any]:
    """Initialize, list tools and call two through the SDK client."""
    async with (
        httpx2.AsyncClient(headers={"authorization": f"Bearer {key}"}) as http,
        Client(streamable_http_client(url, http_client=http), mode="legacy") as client,
    ):
        tools = await client.list_tools()
        added = await client.call_tool("add", {"a": 2, "b": 3})
        echoed = await client.call_tool("echo", {"text": "hi"})
        return {
            "server": client.server_info.name if client.server_info else None,
            "tools": sorted(tool.name for tool in tools.tools),
            "added": [getattr(part, "text", None) for part in added.content],
            "echoed": [getattr(part, "text", None) for part in echoed.content],
            "error": echoed.is_error,
        }


async def sse_session(url: str, key: str) -> dict[str, Any]:
    """The same conversation over the SSE transport."""
    async with Client(sse_client(url, headers={"authorization": f"Bearer {key}"}), mode="legacy") as client:
        tools = await client.list_tools()
        added = await client.call_tool("add", {"a": 4, "b": 5})
        return {
            "tools": sorted(tool.name for tool in tools.tools),
            "added": [getattr(p, "text", None) for p in added.content],
        }


def rpc(
    gateway: GatewayThread,
    key: str | None,
    method: str,
    params: dict | None = None,
    *,
    session: str | None = None,
    path: str = "/v1/mcp",
    http_method: str = "POST",
) -> httpx.Response:
    headers = {
        "accept": ACCEPT,
        **({"authorization": f"Bearer {key}"} if key else {}),
        **({"mcp-session-id": session} if session else {}),
    }
    message = {"jsonrpc": "2.0", "id": 7, "method": method, **({"params": params} if params is not None else {})}
    return httpx.request(http_method, f"{gateway.url}{path}", json=message, headers=headers)


def rpc_message(response: httpx.Response) -> dict:
    """The JSON-RPC message of a JSON or single-event SSE response."""
    if response.headers["content-type"].startswith("text/event-stream"):
        data = [line.removeprefix("data: ") for line in response.text.splitlines() if line.startswith("data: ")]
        return json.loads(data[-1])
    return response.json()


def test_sdk_client_through_the_gateway_keeps_the_session(
    mcp_gateway: GatewayThread, upstream: RecordingMcpServer
) -> None:
    upstream.requests.clear()
    outcome = asyncio.run(sdk_session(f"{mcp_gateway.url}/v1/mcp", "key-alice"))
    assert outcome == {
        "server": "notes",
        "tools": ["add", "echo"],
        "added": ["5"],
        "echoed": ["echo: hi"],
        "error": False,
    }
    first, *rest = upstream.requests
    assert first["method"] == "POST" and first["session"] is None
    sessions = {request["session"] for request in rest}
    assert len(rest) >= 4 and len(sessions) == 1 and None not in sessions
    assert {"GET", "DELETE"} <= {request["method"] for request in rest}  # the push channel and the termination
    assert {request["authorization"] for request in upstream.requests} == {"Bearer mcp-token"}


def test_sdk_sse_client_is_bridged_to_the_streamable_upstream(
    mcp_gateway: GatewayThread, upstream: RecordingMcpServer
) -> None:
    upstream.requests.clear()
    outcome = asyncio.run(sse_session(f"{mcp_gateway.url}/v1/mcp/sse", "key-alice"))
    assert outcome == {"tools": ["add", "echo"], "added": ["9"]}
    first, *rest = upstream.requests
    assert first["session"] is None and len({request["session"] for request in rest}) == 1
    assert {request["authorization"] for request in upstream.requests} == {"Bearer mcp-token"}


def test_an_sse_stream_is_bound_to_the_principal_that_opened_it(mcp_gateway: GatewayThread) -> None:
    opened = {"authorization": "Bearer key-alice", "accept": "text/event-stream"}
    with httpx.stream("GET", f"{mcp_gateway.url}/v1/mcp/sse", headers=opened) as stream:
        lines = stream.iter_lines()
        endpoint = next(line for line in lines if line.startswith("data: ")).removeprefix("data: ")
        message = {"jsonrpc": "2.0", "id": 3, "method": "initialize", "params": INITIALIZE}
        stolen = httpx.post(f"{mcp_gateway.url}{endpoint}", json=message, headers={"authorization": "Bearer key-bob"})
        assert stolen.status_code == 404 and stolen.json()["id"] == 3
        own = httpx.post(f"{mcp_gateway.url}{endpoint}", json=message, headers={"authorization": "Bearer key-alice"})
        assert own.status_code == 202
        answer = next(line for line in lines if line.startswith("data: "))
    assert json.loads(answer.removeprefix("data: "))["result"]["serverInfo"]["name"] == "notes"


def test_a_departed_sse_client_frees_its_connection_at_once(mcp_gateway: GatewayThread) -> None:
    """The stream is quiet (no keepalive for 15 s), yet the gateway notices the client left as soon as it closes."""
    assert mcp_gateway.gateway.data is not None
    tracker = mcp_gateway.gateway.data.tracker
    opened = {"authorization": "Bearer key-alice", "accept": "text/event-stream"}
    with httpx.stream("GET", f"{mcp_gateway.url}/v1/mcp/sse", headers=opened) as stream:
        lines = stream.iter_lines()  # held: a dropped line iterator would close the response (and the connection)
        next(line for line in lines if line.startswith("data: "))
        assert tracker.busy == 1
    wait_until(lambda: tracker.busy == 0, timeout=2, what="the departed client's connection to be freed")


def test_deprecated_alias_serves_and_says_so(mcp_gateway: GatewayThread) -> None:
    response = rpc(mcp_gateway, "key-alice", "initialize", INITIALIZE, path="/mcp")
    assert response.status_code == 200 and response.headers["deprecation"] == "true"
    assert rpc_message(response)["result"]["serverInfo"]["name"] == "notes"
    assert response.headers["mcp-session-id"]


def test_a_session_is_bound_to_the_principal_that_opened_it(mcp_gateway: GatewayThread) -> None:
    opened = rpc(mcp_gateway, "key-alice", "initialize", INITIALIZE)
    session = opened.headers["mcp-session-id"]
    stolen = rpc(mcp_gateway, "key-bob", "tools/list", {}, session=session)
    assert stolen.status_code == 404
    assert stolen.json() == {
        "jsonrpc": "2.0",
        "id": 7,
        "error": {"code": -32000, "message": "unknown MCP session", "data": {"code": "not_found"}},
    }
    own = rpc(mcp_gateway, "key-alice", "tools/list", {}, session=session)
    assert own.status_code == 200 and {tool["name"] for tool in rpc_message(own)["result"]["tools"]} == {"add", "echo"}
    ended = httpx.delete(
        f"{mcp_gateway.url}/v1/mcp", headers={"authorization": "Bearer key-alice", "mcp-session-id": session}
    )
    assert ended.status_code == 200


@pytest.mark.parametrize(
    ("key", "path", "method", "status", "code"),
    [
        (None, "/v1/mcp", "POST", 401, "unauthenticated"),
        ("key-carol", "/v1/mcp", "POST", 404, "no_route"),
        ("key-alice", "/v1/mcp", "PUT", 405, "method_not_allowed"),
        ("key-alice", "/v1/mcp/sse", "PUT", 405, "method_not_allowed"),
        ("key-alice", "/v1/mcp/sse", "POST", 404, "not_found"),
    ],
)
def test_errors_are_jsonrpc_error_objects(
    mcp_gateway: GatewayThread,
    upstream: RecordingMcpServer,
    key: str | None,
    path: str,
    method: str,
    status: int,
    code: str,
) -> None:
    upstream.requests.clear()
    response = rpc(mcp_gateway, key, "tools/list", {}, path=path, http_method=method)
    assert response.status_code == status
    document = response.json()
    assert document["jsonrpc"] == "2.0" and document["id"] == 7 and document["error"]["data"]["code"] == code
    assert upstream.requests == []
