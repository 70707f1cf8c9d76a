"""OIDC Bearer tokens against a real provider on loopback: workspace mapping, rejection, header precedence.

The provider (tests/support/oidc_provider.py) issues JWT access tokens and validates them at userinfo.
"""

from __future__ import annotations

import secrets
from io import StringIO
from typing import Any

import anthropic
import pytest
import requests
from django.core.management import call_command
from rest_framework.test import APIClient

from registry.workspaces import services
from tests.support.api_errors import assert_error
from tests.support.oidc_provider import RunningProvider
from tests.support.tenants import Tenant, make_tenant


def new_subject() -> str:
    return "user-" + secrets.token_hex(8)


def client_with(**headers: str) -> APIClient:
    client = APIClient()
    client.credentials(**headers)
    return client


def bearer(token: str) -> str:
    return f"Bearer {token}"


def create_agent(tenant: Tenant, name: str) -> str:
    response = tenant.client.post("/v1/agents", {"name": name, "model": "claude-sonnet-4-5"}, format="json")
    assert response.status_code == 200, response.content
    agent_id: str = response.json()["id"]
    return agent_id


def token_of_member(oidc: RunningProvider, tenant: Tenant) -> str:
    """A fresh subject mapped to `tenant` by the management command, and a token the provider issued it."""
    subject = new_subject()
    out = StringIO()
    call_command("workspace", "member", tenant.workspace.id, "--subject", subject, stdout=out)
    assert tenant.workspace.id in out.getvalue()
    return oidc.issue_token(subject)


def assert_unauthenticated(response: Any) -> None:
    assert_error(response, 401, "authentication_error")
    assert response["WWW-Authenticate"].startswith("Bearer")


# -- the provider itself behaves as the tests rely on ---------------------------------------


def test_provider_userinfo_validates_tokens(oidc: RunningProvider) -> None:
    subject = new_subject()
    userinfo_url = oidc.discovery()["userinfo_endpoint"]

    good = requests.get(userinfo_url, headers={"Authorization": bearer(oidc.issue_token(subject))}, timeout=5)
    expired = requests.get(
        userinfo_url, headers={"Authorization": bearer(oidc.issue_token(subject, token_lifetime=-120))}, timeout=5
    )

    assert good.status_code == 200
    assert good.json()["sub"] == subject
    assert expired.status_code == 401
    assert 'error="invalid_token"' in expired.headers["WWW-Authenticate"]


def test_provider_serves_its_public_keys(oidc: RunningProvider) -> None:
    keys = requests.get(oidc.discovery()["jwks_uri"], timeout=5).json()["keys"]

    assert [key["kty"] for key in keys] == ["RSA"]
    assert all("d" not in key for key in keys)


# -- the registry ---------------------------------------------------------------------------


def test_member_token_lists_only_its_workspace_agents(oidc: RunningProvider, tenant: Tenant) -> None:
    own_agent = create_agent(tenant, "own")
    create_agent(make_tenant("elsewhere"), "foreign")
    client = client_with(HTTP_AUTHORIZATION=bearer(token_of_member(oidc, tenant)))

    response = client.get("/v1/agents")

    assert response.status_code == 200, response.content
    assert [agent["id"] for agent in response.json()["data"]] == [own_agent]


def test_membership_set_by_service_maps_the_subject(oidc: RunningProvider, other_tenant: Tenant) -> None:
    subject = new_subject()
    services.membership_set(workspace=other_tenant.workspace, subject=subject)
    foreign_agent = create_agent(other_tenant, "theirs")
    client = client_with(HTTP_AUTHORIZATION=bearer(oidc.issue_token(subject)))

    response = client.get(f"/v1/agents/{foreign_agent}")

    assert response.status_code == 200, response.content
    assert response.json()["id"] == foreign_agent


def test_member_token_cannot_read_another_workspace_agent(oidc: RunningProvider, tenant: Tenant) -> None:
    foreign_agent = create_agent(make_tenant("elsewhere"), "foreign")
    client = client_with(HTTP_AUTHORIZATION=bearer(token_of_member(oidc, tenant)))

    assert_error(client.get(f"/v1/agents/{foreign_agent}"), 404, "not_found_error")


def test_unknown_subject_is_an_authentication_error(oidc: RunningProvider, db: None) -> None:
    client = client_with(HTTP_AUTHORIZATION=bearer(oidc.issue_token(new_subject())))

    assert_unauthenticated(client.get("/v1/agents"))


@pytest.mark.parametrize(
    "spoil",
    [
        pytest.param(lambda token: token[:-6] + "AAAAAA", id="bad-signature"),
        pytest.param(lambda token: "not-a-jwt", id="garbage"),
    ],
)
def test_invalid_token_is_rejected(oidc: RunningProvider, tenant: Tenant, spoil: Any) -> None:
    client = client_with(HTTP_AUTHORIZATION=bearer(spoil(token_of_member(oidc, tenant))))

    assert_unauthenticated(client.get("/v1/agents"))


def test_expired_token_is_rejected(oidc: RunningProvider, tenant: Tenant) -> None:
    subject = new_subject()
    services.membership_set(workspace=tenant.workspace, subject=subject)
    client = client_with(HTTP_AUTHORIZATION=bearer(oidc.issue_token(subject, token_lifetime=-120)))

    assert_unauthenticated(client.get("/v1/agents"))


def test_workspace_api_key_as_bearer_is_rejected(oidc: RunningProvider, tenant: Tenant) -> None:
    client = client_with(HTTP_AUTHORIZATION=bearer(tenant.api_key))

    answer = client.get("/v1/agents")
    assert_unauthenticated(answer)
    assert "x-api-key header" in answer.json()["error"]["message"]  # says where a workspace key goes


def test_invalid_api_key_decides_alone_over_a_valid_bearer(oidc: RunningProvider, tenant: Tenant) -> None:
    client = client_with(HTTP_AUTHORIZATION=bearer(token_of_member(oidc, tenant)), HTTP_X_API_KEY="sk-reg-wrong")

    assert_unauthenticated(client.get("/v1/agents"))


def test_valid_api_key_decides_alone_over_a_garbage_bearer(tenant: Tenant, refusing_url: str, settings: Any) -> None:
    # The provider is unreachable too: the Bearer token must not even be looked at.
    settings.OIDC_OP_USER_ENDPOINT = refusing_url
    own_agent = create_agent(tenant, "own")
    client = client_with(HTTP_AUTHORIZATION=bearer("garbage"), HTTP_X_API_KEY=tenant.api_key)

    response = client.get("/v1/agents")

    assert response.status_code == 200, response.content
    assert [agent["id"] for agent in response.json()["data"]] == [own_agent]


def test_unreachable_provider_is_an_authentication_error(
    oidc: RunningProvider, tenant: Tenant, refusing_url: str, settings: Any
) -> None:
    token = token_of_member(oidc, tenant)
    settings.OIDC_OP_USER_ENDPOINT = refusing_url
    client = client_with(HTTP_AUTHORIZATION=bearer(token))

    assert_unauthenticated(client.get("/v1/agents"))


@pytest.mark.django_db(transaction=True)
def test_reference_client_lists_agents_with_an_access_token(oidc: RunningProvider, live_server: Any) -> None:
    tenant = make_tenant("sdk")
    own_agent = create_agent(tenant, "own")
    create_agent(make_tenant("elsewhere"), "foreign")
    token = token_of_member(oidc, tenant)

    with anthropic.Anthropic(api_key=token, base_url=live_server.url, max_retries=0) as client:
        agents = list(client.beta.agents.list())

    assert [agent.id for agent in agents] == [own_agent]
    assert agents[0].name == "own"
