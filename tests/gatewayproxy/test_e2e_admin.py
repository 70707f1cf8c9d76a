"""End to end on the admin plane: health, readiness, metrics, redacted config, validation, read-only writes,
and the loopback rule with its admin token."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import yaml

from tests.support.gateway.documents import destination, one_destination
from tests.support.gateway.provider import FakeProvider
from tests.support.gateway.thread import GatewayFactory, GatewayThread

pytestmark = pytest.mark.e2e


def document(provider: FakeProvider, **extra: Any) -> dict[str, Any]:
    upstream = destination(
        "vendor_a",
        f"{provider.url}/v1",
        model_map={"small": "provider-small"},
        pricing={"input_per_1m": 1.5, "output_per_1m": 2.0},
    )
    guardrail_state = {"kind": "redis", "url": "redis://user:hunter2@127.0.0.1:6379/0", "misspeled": 1}
    return one_destination(upstream, guardrail_state=guardrail_state, **extra)


@pytest.fixture(scope="module")
def gateway(module_gateway_factory: GatewayFactory, primary: FakeProvider) -> GatewayThread:
    return module_gateway_factory(document(primary))


def test_health_and_readiness(gateway: GatewayThread) -> None:
    assert httpx.get(f"{gateway.admin_url}/healthz").json() == {"status": "ok"}
    response = httpx.get(f"{gateway.admin_url}/readyz")
    assert response.status_code == 200 and response.headers["x-request-id"].startswith("req_")


def test_metrics_exposition(gateway: GatewayThread) -> None:
    httpx.post(f"{gateway.url}/v1/chat/completions", json={"model": "small", "messages": []})
    text = httpx.get(f"{gateway.admin_url}/metrics").text
    for name in (
        "gateway_requests_total",
        "gateway_request_duration_seconds_bucket",
        "gateway_overhead_seconds",
        "gateway_upstream_attempts_total",
        "gateway_in_flight_requests",
    ):
        assert name in text
    assert 'gateway_requests_total{route="all",status="200"}' in text


def test_config_is_redacted(gateway: GatewayThread) -> None:
    config = httpx.get(f"{gateway.admin_url}/admin/v1/config").json()
    assert config["destinations"]["one"]["model_map"] == {"small": "provider-small"}
    assert "hunter2" not in str(config)
    assert config["guardrail_state"]["url"] == "redis://user:[redacted]@127.0.0.1:6379/0"
    assert config["spend"]["admission"]["default_max_output_tokens"] == 4096


def test_destinations_routes_plugins(gateway: GatewayThread) -> None:
    destinations = httpx.get(f"{gateway.admin_url}/admin/v1/destinations").json()["data"]
    assert [(d["name"], d["kind"]) for d in destinations] == [("one", "vendor_a")]
    assert [r["name"] for r in httpx.get(f"{gateway.admin_url}/admin/v1/routes").json()["data"]] == ["all"]
    assert httpx.get(f"{gateway.admin_url}/admin/v1/plugins").json() == {"data": []}
    assert httpx.get(f"{gateway.admin_url}/admin/v1/health/plugins").json()["total"] == 0


@pytest.mark.parametrize(
    ("method", "path", "status", "code"),
    [
        ("POST", "/admin/v1/plugins", 503, "wasm_plugins_disabled"),
        ("GET", "/admin/v1/pricing/resolve?provider=vendor_a&model=small", 503, "pricing_unavailable"),
        ("GET", "/admin/v1/spend/usage", 503, "usage_query_unavailable"),
        ("GET", "/admin/v1/guardrails/effective?session_id=s", 503, "guardrails_unavailable"),
        ("PUT", "/admin/v1/destinations/one", 409, "config_read_only"),
        ("DELETE", "/admin/v1/routes/all", 409, "config_read_only"),
        ("PUT", "/admin/v1/config/plugins/x", 409, "config_read_only"),
        ("GET", "/admin/v1/nothing", 404, "not_found"),
    ],
)
def test_admin_error_codes(gateway: GatewayThread, method: str, path: str, status: int, code: str) -> None:
    response = httpx.request(method, f"{gateway.admin_url}{path}", json={})
    assert response.status_code == status
    assert response.json()["error"]["code"] == code


def test_validate_accepts_a_good_document_and_lists_every_problem(
    gateway: GatewayThread, primary: FakeProvider
) -> None:
    good = httpx.post(f"{gateway.admin_url}/admin/v1/config/validate", json=document(primary))
    assert good.json() == {"valid": True}
    bad = document(primary, surprise=1)
    bad["routes"][0]["strategy"]["targets"][0]["destination"] = "missing"
    response = httpx.post(
        f"{gateway.admin_url}/admin/v1/config/validate",
        content=yaml.safe_dump(bad),
        headers={"content-type": "application/yaml"},
    )
    assert response.status_code == 400
    assert response.json()["error"]["problems"] == ["surprise: unknown key"]


def test_validate_runs_live_checks(gateway: GatewayThread, primary: FakeProvider) -> None:
    candidate = document(primary)
    candidate["vaults"] = [{"name": "v", "resolver": "env", "env_var": "GATEWAY_TEST_UNSET_VARIABLE"}]
    response = httpx.post(f"{gateway.admin_url}/admin/v1/config/validate", json=candidate)
    assert response.status_code == 400
    assert response.json()["error"]["problems"] == [
        "destinations.one.credentials: environment variable GATEWAY_TEST_UNSET_VARIABLE is not set"
    ]


def test_pricing_resolves_with_a_cost_model(gateway_factory: GatewayFactory, primary: FakeProvider) -> None:
    running = gateway_factory(document(primary, plugins={"cost_model": {"name": "c", "kind": "static_table"}}))
    response = httpx.get(
        f"{running.admin_url}/admin/v1/pricing/resolve", params={"provider": "vendor_a", "model": "small"}
    )
    health = httpx.get(f"{running.admin_url}/admin/v1/health/plugins").json()
    assert response.json()["pricing"] == {"input_per_1m": 1.5, "output_per_1m": 2.0}
    assert health["plugins"] == [{"slot": "cost_model", "name": "c", "kind": "static_table", "status": "configured"}]


def test_admin_token_guards_every_admin_request(
    gateway_factory: GatewayFactory, primary: FakeProvider, tmp_path: Any
) -> None:
    (tmp_path / "admin.token").write_text("s3cret\n")
    running = gateway_factory(document(primary, server={"admin_token_file": "admin.token"}), base_dir=tmp_path)
    refused = httpx.get(f"{running.admin_url}/healthz")
    allowed = httpx.get(f"{running.admin_url}/healthz", headers={"authorization": "Bearer s3cret"})
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "unauthenticated"
    assert allowed.status_code == 200
