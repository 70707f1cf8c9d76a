"""Registry sessions through a real gateway: the model call's JWT names the workspace and session, which the
gateway verifies against the registry's JWKS and applies (usage records, per-workspace limits)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from fakes import model as replies
from fakes.model import FakeModel
from fakes.waiting import wait_until
from registry.runtime.identity import ModelCallIdentity
from registry.sessions.models import Session
from tests.support.gateway.documents import destination, fallback_route, mcp_destination, path_vault
from tests.support.gateway.thread import GatewayFactory, GatewayThread
from tests.support.mcp_servers import ShopMcpServer
from tests.support.processes import LiveRegistry
from tests.support.runtime.sessions import of_type, text_of

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
QPM_PER_WORKSPACE = 2


def gateway_document(registry_url: str, model_url: str, mcp_url: str, *, qpm: int | None) -> dict[str, Any]:
    """A gateway that knows the registry's sessions; `qpm`: a per-workspace request limit."""
    shop_route = {"path": "/v1/mcp", "header": {"x-mcp-server": "shop"}}
    return {
        "identity": {
            "scope_dims": ["workspace", "session"],
            "validators": [
                {
                    "name": "registry",
                    "kind": "jwt",
                    "jwks_url": f"{registry_url}/.well-known/jwks.json",
                    "issuers": ["agent-registry"],
                    "audiences": ["ai-gateway"],
                    "scope_from": {"jwt_claims": {"workspace": "workspace", "session": "session"}},
                }
            ],
        },
        "vaults": [path_vault()],
        "destinations": {"model": destination("vendor_b", model_url), "shop": mcp_destination(mcp_url, "v")},
        "routes": [fallback_route("shop", shop_route, "shop"), fallback_route("all", None, "model")],
        "rate_limits": [{"name": "per-workspace", "qpm": qpm}] if qpm else [],
        "spend": {"key_dims": ["workspace"]},
        "plugins": {"usage_sinks": [{"name": "out", "kind": "stdout", "flush_interval_ms": 0}]},
    }


@pytest.fixture
def gateway(
    gateway_factory: GatewayFactory, registry: LiveRegistry, fake_model: FakeModel, shop_server: ShopMcpServer
) -> GatewayThread:
    return gateway_factory(gateway_document(registry.url, fake_model.url, shop_server.url, qpm=None))


@pytest.fixture
def limited_gateway(
    gateway_factory: GatewayFactory, registry: LiveRegistry, fake_model: FakeModel, shop_server: ShopMcpServer
) -> GatewayThread:
    return gateway_factory(gateway_document(registry.url, fake_model.url, shop_server.url, qpm=QPM_PER_WORKSPACE))


def usage_records(capsys: pytest.CaptureFixture[str], seen: list[dict[str, Any]]) -> list[dict[str, Any]]:
    seen += [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    return seen


def test_a_sessions_model_call_carries_its_workspace_and_session(
    model, open_session, workers, start_worker, gateway, capsys
):
    model.add(replies.text("hello through the gateway"))
    chat = open_session()
    workers.pause()
    chat.processes.append(start_worker(REGISTRY_MODEL_BASE_URL=gateway.url))
    chat.say("hi")
    events = chat.wait_idle()
    assert [text_of(event) for event in of_type(events, "agent.message")] == ["hello through the gateway"]

    seen: list[dict[str, Any]] = []
    wait_until(lambda: bool(usage_records(capsys, seen)), what="the gateway's usage record")
    [record] = seen
    workspace_id = Session.objects.get(pk=chat.session_id).workspace_id
    assert record["scope"] == {"workspace": workspace_id, "session": chat.session_id}
    assert record["status"] == 200 and record["streamed"] is True
    # Upstream, the gateway's own provider credential replaces the registry's token.
    assert not model.requests[0].headers.get("authorization", "").startswith("Bearer ey")


def test_a_per_workspace_limit_refuses_only_the_bursting_workspace(model, limited_gateway):
    gateway = limited_gateway
    identity = ModelCallIdentity()  # signs with the key the live registry publishes (same database)
    quiet = identity.headers(workspace_id="wsp_quiet", session_id="sesn_quiet")
    bursting = identity.headers(workspace_id="wsp_burst", session_id="sesn_burst")
    model.add(*[replies.text("ok") for _ in range(QPM_PER_WORKSPACE + 1)])
    body = {"model": "claude-test-model", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}

    def send(headers: dict[str, str]) -> int:
        return httpx.post(f"{gateway.url}/v1/messages", json=body, headers=headers, timeout=10).status_code

    burst = [send(bursting) for _ in range(QPM_PER_WORKSPACE + 1)]
    assert burst == [200] * QPM_PER_WORKSPACE + [429]
    assert send(quiet) == 200
    assert send({"authorization": "Bearer not-a-registry-token"}) == 401


def test_mcp_calls_go_through_the_gateway_when_asked(model, open_session, shop, workers, start_worker, gateway):
    model.add(replies.tool_call("lookup_order", {"order_id": "A1"}), replies.text("shipped"))
    # The agent names a URL nobody serves: the gateway's `shop` destination is what answers.
    servers = [{"type": "url", "name": "shop", "url": "https://shop.invalid/mcp"}]
    toolset = {
        "type": "mcp_toolset",
        "mcp_server_name": "shop",
        "default_config": {"permission_policy": {"type": "always_allow"}},
    }
    chat = open_session(mcp_servers=servers, tools=[toolset])
    workers.pause()
    chat.processes.append(start_worker(REGISTRY_MODEL_BASE_URL=gateway.url, REGISTRY_MCP_VIA_GATEWAY="1"))
    chat.say("where is A1?")
    events = chat.wait_idle()
    [result] = of_type(events, "agent.mcp_tool_result")
    assert result["is_error"] is False and result["content"] == [{"type": "text", "text": "order A1: shipped"}]
    assert shop.calls == [("lookup_order", {"order_id": "A1"})]
