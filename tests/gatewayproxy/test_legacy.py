"""The deprecated `legacy_mcp_gateway` document: its expansion (auth, servers, per-server routing), the keys
it refuses, and the shipped example serving MCP end to end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from gatewayproxy.app import Gateway
from gatewayproxy.config.loader import ConfigError, validate_document
from tests.support.gateway.thread import GatewayFactory
from tests.support.mcp_servers import RecordingMcpServer

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "gateway" / "legacy_mcp_gateway.yaml"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
}
ACCEPT = "application/json, text/event-stream"


def legacy(**fields: Any) -> dict[str, Any]:
    return {"legacy_mcp_gateway": {"servers": [{"name": "docs", "url": "http://docs/mcp"}], **fields}}


def test_auth_and_servers_expand_to_validators_destinations_and_routes() -> None:
    loaded = validate_document(
        legacy(
            auth={
                "api_keys_file": "keys.yaml",
                "jwt": {
                    "issuer": "https://issuer",
                    "audience": ["mcp"],
                    "jwks_url": "https://issuer/jwks",
                    "claims": {"org": "team"},
                },
            },
            servers=[
                {"name": "docs", "url": "http://docs/mcp", "token_env": "DOCS"},
                {"name": "tickets", "url": "http://tickets/mcp"},
            ],
        ),
        base_dir="/etc/gw",
    )
    config = loaded.config
    api_key, jwt = config.identity.validators
    assert (api_key.kind, api_key.keys_file) == ("api_key", "/etc/gw/keys.yaml")
    assert (jwt.issuers, jwt.audiences, jwt.scope_from.jwt_claims) == (["https://issuer"], ["mcp"], {"org": "team"})
    assert config.identity.scope_dims == ["team"]
    assert {name: d.base_url for name, d in config.destinations.items()} == {
        "docs": "http://docs/mcp",
        "tickets": "http://tickets/mcp",
    }
    assert [(v.name, v.env_var) for v in config.vaults] == [("legacy_docs", "DOCS"), ("legacy_tickets", None)]
    assert [(r.name, r.match.header, r.strategy.targets[0].destination) for r in config.routes] == [
        ("legacy_mcp_docs", {"x-mcp-server": "docs"}, "docs"),
        ("legacy_mcp_tickets", {"x-mcp-server": "tickets"}, "tickets"),
        ("legacy_mcp", {}, "docs"),
    ]
    assert loaded.warnings[0].startswith("legacy_mcp_gateway is deprecated")


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        (
            legacy(servers=[{"name": "docs", "url": "http://docs/mcp", "tools": {"deny": ["drop"]}}]),
            "legacy_mcp_gateway.servers[0].tools: has no equivalent",
        ),
        (legacy(auth={"basic": {}}), "legacy_mcp_gateway.auth.basic: has no equivalent"),
        (
            legacy(auth={"jwt": {"issuer": "i", "audience": "a", "jwks_url": "u", "leeway": 5}}),
            "legacy_mcp_gateway.auth.jwt.leeway: has no equivalent",
        ),
        (legacy(servers=[{"url": "http://docs/mcp"}]), "legacy_mcp_gateway.servers[0]: needs `name` and `url`"),
    ],
)
def test_what_cannot_be_honoured_is_refused(document: dict[str, Any], problem: str) -> None:
    with pytest.raises(ConfigError) as raised:
        validate_document(document)
    assert raised.value.problems[0].startswith(problem)


def test_the_example_serves_mcp(
    gateway_factory: GatewayFactory, upstream: RecordingMcpServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VAULT__MCP_TOKENS__DOCS", "legacy-token")
    document = yaml.safe_load(EXAMPLE.read_text())
    section = document["legacy_mcp_gateway"]
    section.update(listen="127.0.0.1:0", admin_listen="127.0.0.1:0")
    for server in section["servers"]:
        server["url"] = upstream.url
    gateway = gateway_factory.around(Gateway(validate_document(document, base_dir=str(EXAMPLE.parent))))
    upstream.requests.clear()
    headers = {"accept": ACCEPT, "authorization": "Bearer example-key"}
    for chosen in ({}, {"x-mcp-server": "tickets"}):
        answer = httpx.post(f"{gateway.url}/v1/mcp", json=INITIALIZE, headers={**headers, **chosen})
        assert answer.status_code == 200 and answer.headers["mcp-session-id"]
        assert "notes" in answer.text  # the upstream's serverInfo.name
    refused = httpx.post(f"{gateway.url}/v1/mcp", json=INITIALIZE, headers={"accept": ACCEPT})
    assert refused.status_code == 401
    served = gateway.metrics_text
    assert 'route="legacy_mcp",status="200"' in served and 'route="legacy_mcp_tickets",status="200"' in served
