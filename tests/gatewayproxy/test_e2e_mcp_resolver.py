"""The wildcard `mcp` destination: the client names a server in `x-mcp-server`, the `http` destination
resolver (on loopback) says where it lives; answers are cached; a client can never supply a URL."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import yaml

from tests.support.gateway.callers import api_key_identity
from tests.support.gateway.documents import fallback_route, file_vault
from tests.support.gateway.provider import FakeProvider
from tests.support.gateway.thread import GatewayFactory, GatewayThread
from tests.support.mcp_servers import RecordingMcpServer
from tests.support.serving import served

pytestmark = pytest.mark.e2e
ACCEPT = "application/json, text/event-stream"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 5,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
}


@pytest.fixture(scope="module")
def resolver() -> Iterator[FakeProvider]:
    """Answers GET /servers/<team>/<server> from its documents."""
    yield from served(FakeProvider("resolver").start())


@pytest.fixture(scope="module")
def gateway(
    module_gateway_factory: GatewayFactory, tmp_path_factory: pytest.TempPathFactory, resolver: FakeProvider
) -> GatewayThread:
    directory = tmp_path_factory.mktemp("resolver")
    template = f"{resolver.url}/servers/{{scope.team}}/{{server}}"
    (directory / "vault.yaml").write_text(yaml.safe_dump({"notes-cred": "mcp-token", "default": "unused"}))
    (directory / "resolver-token").write_text("resolver-secret\n")
    document = {
        "identity": api_key_identity(directory, {"key-red": ("alice", {"team": "red"})}, relative=True),
        "vaults": [file_vault("vault.yaml")],
        "destinations": {
            "any": {
                "kind": "mcp",
                "credentials": {"vault": "files", "credential_id": "default"},
                "destination_resolver": {
                    "kind": "http",
                    "url_template": template,
                    "bearer_token_file": "resolver-token",
                    "timeout_ms": 2000,
                    "cache_ttl_secs": 300,
                },
            }
        },
        "routes": [fallback_route("mcp", {"path": "/v1/mcp"}, "any")],
    }
    return module_gateway_factory(document, base_dir=directory)


@pytest.fixture(autouse=True)
def _fresh(resolver: FakeProvider, upstream: RecordingMcpServer) -> None:
    resolver.reset()
    resolver.documents["/servers/red/notes"] = {"base_url": upstream.url, "credential_id": "notes-cred"}
    upstream.requests.clear()


def initialize(gateway: GatewayThread, **headers: str) -> httpx.Response:
    return httpx.post(
        f"{gateway.url}/v1/mcp",
        json=INITIALIZE,
        headers={"accept": ACCEPT, "authorization": "Bearer key-red", **headers},
    )


def test_the_named_server_is_resolved_and_cached(
    gateway: GatewayThread, resolver: FakeProvider, upstream: RecordingMcpServer
) -> None:
    for _ in range(2):
        answer = initialize(gateway, **{"x-mcp-server": "notes"})
        assert answer.status_code == 200 and '"name":"notes"' in answer.text.replace(" ", "")
    assert [(r.method, r.path, r.headers["authorization"]) for r in resolver.received] == [
        ("GET", "/servers/red/notes", "Bearer resolver-secret")
    ]
    assert [request["authorization"] for request in upstream.requests] == ["Bearer mcp-token"] * 2


@pytest.mark.parametrize(
    ("headers", "status", "code"),
    [
        ({}, 400, "invalid_request"),
        ({"x-mcp-server": "http://attacker.example/mcp"}, 400, "invalid_request"),
        ({"x-mcp-server": "../admin"}, 400, "invalid_request"),
        ({"x-mcp-server": "unknown"}, 404, "no_route"),
    ],
)
def test_what_the_resolver_does_not_vouch_for_is_refused(
    gateway: GatewayThread, upstream: RecordingMcpServer, headers: dict[str, Any], status: int, code: str
) -> None:
    answer = initialize(gateway, **headers)
    assert answer.status_code == status
    assert answer.json()["error"]["data"]["code"] == code and answer.json()["id"] == 5
    assert upstream.requests == []


def test_a_broken_resolver_answer_is_a_502(
    gateway: GatewayThread, resolver: FakeProvider, upstream: RecordingMcpServer
) -> None:
    resolver.documents["/servers/red/broken"] = {"base_url": "file:///etc/passwd"}
    answer = initialize(gateway, **{"x-mcp-server": "broken"})
    assert answer.status_code == 502 and answer.json()["error"]["data"]["code"] == "upstream_error"
    assert upstream.requests == []


def test_the_resolver_token_stays_out_of_errors(gateway: GatewayThread) -> None:
    answer = initialize(gateway, **{"x-mcp-server": "unknown"})
    assert "resolver-secret" not in answer.text
