"""Extension groups (policy, pricing, runtime) and the internal endpoints the gateway uses."""

from __future__ import annotations

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from rest_framework.test import APIClient

from registry.internal.models import UsageRecord
from registry.workspaces import services as workspace_services
from tests.support.api_errors import assert_error

DOMAIN = "ext.example.com"
POLICY = f"/apis/policy.{DOMAIN}/v1"
PRICING = f"/apis/pricing.{DOMAIN}/v1"
RUNTIME = f"/apis/runtime.{DOMAIN}/v1"


@pytest.fixture(autouse=True)
def groups(settings):
    settings.REGISTRY_EXTENSION_DOMAIN = DOMAIN
    settings.REGISTRY_EXTENSION_GROUPS = ["policy", "pricing", "runtime"]


@pytest.fixture
def admin(tenant):
    issued = workspace_services.api_key_issue(workspace=tenant.workspace, org_admin=True)
    client = APIClient()
    client.credentials(HTTP_X_API_KEY=issued.plaintext)
    return client


GUARDRAIL = {"name": "no-secrets", "type": "blocked_terms", "config": {"terms": ["password"]}}


def test_guardrail_writes_need_an_org_admin_key(api, admin):
    assert_error(api.post(f"{POLICY}/guardrails", GUARDRAIL, format="json"), 403, "permission_error", "admin")
    created = admin.post(f"{POLICY}/guardrails", GUARDRAIL, format="json").json()
    assert created["guardrail_type"] == "blocked_terms" and created["phases"]
    assert [item["name"] for item in api.get(f"{POLICY}/guardrails").json()["data"]] == ["no-secrets"]
    assert api.get(f"{POLICY}/guardrails/{created['id']}").json()["config"] == {"terms": ["password"]}
    updated = admin.post(f"{POLICY}/guardrails/{created['id']}", {"enabled": False}, format="json").json()
    assert updated["enabled"] is False
    assert_error(admin.post(f"{POLICY}/guardrails", GUARDRAIL, format="json"), 409, "conflict_error", "name")
    assert admin.delete(f"{POLICY}/guardrails/{created['id']}").json()["type"] == "guardrail_deleted"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({**GUARDRAIL, "type": "telepathy"}, "type"),
        ({**GUARDRAIL, "config": {"terms": []}}, "config"),
        ({"name": "p", "type": "pii_regex", "config": {"patterns": ["(unclosed"]}}, "regex"),
        ({"name": "b", "type": "user_daily_cost_budget", "config": {"usd": 0}}, "usd"),
        ({"name": "m", "type": "model_allowlist", "config": {"models": ["x"]}, "phases": ["tool_call"]}, "phases"),
    ],
)
def test_invalid_guardrails(admin, body, field):
    assert_error(admin.post(f"{POLICY}/guardrails", body, format="json"), 400, "invalid_request_error", field)


def test_guardrails_limited_to_workspaces(admin, other_tenant, tenant):
    admin.post(f"{POLICY}/guardrails", {**GUARDRAIL, "workspace_ids": [tenant.workspace.id]}, format="json")
    assert other_tenant.client.get(f"{POLICY}/guardrails").json()["data"] == []


def test_guardrail_types_and_harnesses(api):
    types = [item["name"] for item in api.get(f"{POLICY}/guardrailtypes").json()["data"]]
    assert "pii_regex" in types and "user_daily_cost_budget" in types
    assert api.get(f"{POLICY}/guardrailtypes/pii_regex").json()["config"]
    assert_error(api.get(f"{POLICY}/guardrailtypes/nope"), 404, "not_found_error")
    assert {item["name"] for item in api.get(f"{RUNTIME}/harnesses").json()["data"]} == {
        "default",
        "code_harness",
        "agent_sdk_harness",
    }


def test_effective_prices(api, admin):
    price = {"provider": "vendor_b", "model": "m1", "input_per_1m": "3", "output_per_1m": "15"}
    admin.post(f"{PRICING}/modelprices", {**price, "effective_from": "2020-01-01T00:00:00Z"}, format="json")
    admin.post(
        f"{PRICING}/modelprices",
        {**price, "input_per_1m": "2", "effective_from": "2021-01-01T00:00:00Z"},
        format="json",
    )
    admin.post(
        f"{PRICING}/modelprices",
        {**price, "input_per_1m": "1", "effective_from": "2999-01-01T00:00:00Z"},
        format="json",
    )
    effective = api.get(f"{PRICING}/modelprices", {"model": "m1"}).json()["data"]
    assert [(item["model"], item["input_per_1m"]) for item in effective] == [("m1", 2.0)]
    assert_error(api.post(f"{PRICING}/modelprices", price, format="json"), 403, "permission_error")
    assert_error(
        admin.post(f"{PRICING}/modelprices", {**price, "input_per_1m": "-1"}, format="json"),
        400,
        "invalid_request_error",
        "input_per_1m",
    )


def test_unserved_group_is_404(api, settings):
    settings.REGISTRY_EXTENSION_GROUPS = ["pricing"]
    assert_error(api.get(f"{POLICY}/guardrails"), 404, "not_found_error")
    assert_error(api.get(f"{RUNTIME}/harnesses"), 404, "not_found_error")
    assert api.get(f"{PRICING}/modelprices").status_code == 200
    assert [group["name"] for group in api.get("/apis").json()["groups"]] == [f"pricing.{DOMAIN}"]


# -- internal endpoints ----------------------------------------------------------------------------
@pytest.fixture
def service(settings, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("service-token-123\n")
    settings.REGISTRY_INTERNAL_TOKEN_FILE = str(token_file)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer service-token-123")
    return client


@pytest.fixture
def session(api):
    agent = api.post("/v1/agents", {"name": "a", "model": "m"}, format="json").json()
    environment = api.post("/v1/environments", {"name": "e"}, format="json").json()
    return api.post("/v1/sessions", {"agent": agent["id"], "environment_id": environment["id"]}, format="json").json()


def test_internal_endpoints_need_the_service_token(service, api, tenant, session):
    path = f"/internal/v1/guardrails/effective?workspace={tenant.workspace.id}&session={session['id']}"
    assert_error(api.get(path), 401, "authentication_error")  # a workspace key is not the service token
    assert_error(APIClient().get(path, HTTP_AUTHORIZATION="Bearer wrong"), 401, "authentication_error")
    assert service.get(path).status_code == 200


def test_bundle_state_and_signature(service, admin, tenant, session, settings, tmp_path):
    admin.post(f"{POLICY}/guardrails", GUARDRAIL, format="json")
    state_path = f"/internal/v1/workspaces/{tenant.workspace.id}/sessions/{session['id']}/guardrail-state"
    assert service.post(state_path, {"spent_usd_today": 1.5}, format="json").json()["state"] == {"spent_usd_today": 1.5}
    service.post(state_path, {"turns": 3}, format="json")
    bundle_path = f"/internal/v1/guardrails/effective?workspace={tenant.workspace.id}&session={session['id']}"
    bundle = service.get(bundle_path).json()
    assert [item["name"] for item in bundle["guardrails"]] == ["no-secrets"]
    assert bundle["state"] == {"spent_usd_today": 1.5, "turns": 3} and bundle["session_id"] == session["id"]
    assert_error(service.get(f"{bundle_path}&signed=true"), 406, "invalid_request_error", "signing key")
    private = ec.generate_private_key(ec.SECP256R1())
    key_file = tmp_path / "bundle.pem"
    key_file.write_bytes(
        private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    settings.REGISTRY_BUNDLE_SIGNING_KEY_FILE = str(key_file)
    token = service.get(bundle_path, HTTP_ACCEPT="application/jose").content.decode()
    assert jwt.get_unverified_header(token)["alg"] == "ES256"
    assert jwt.decode(token, private.public_key(), algorithms=["ES256"])["guardrails"][0]["name"] == "no-secrets"
    assert_error(
        service.get(f"/internal/v1/guardrails/effective?workspace=wsp_x&session={session['id']}"),
        404,
        "not_found_error",
    )


def test_usage_ingestion_is_idempotent(service, tenant):
    records = [
        {
            "request_id": f"req-{index}",
            "ts": "2026-11-22T05:00:00+00:00",
            "model": "m",
            "input_tokens": 10,
            "output_tokens": 5,
            "cost_usd": 0.001,
            "scope": {"workspace": tenant.workspace.id},
        }
        for index in range(3)
    ]
    assert service.post("/internal/v1/usage", {"records": records}, format="json").json() == {
        "accepted": 3,
        "duplicates": 0,
    }
    assert service.post("/internal/v1/usage", {"records": records[1:]}, format="json").json() == {
        "accepted": 0,
        "duplicates": 2,
    }
    assert service.post("/internal/v1/usage", records[0], format="json").json()["duplicates"] == 1
    assert UsageRecord.objects.count() == 3
    assert_error(
        service.post("/internal/v1/usage", {"records": [{"model": "m"}]}, format="json"),
        400,
        "invalid_request_error",
        "request_id",
    )
