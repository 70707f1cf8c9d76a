"""The reference client (anthropic 2.10.0) drives agents and environments against a live registry."""

from __future__ import annotations

import anthropic
import pytest

from registry.runtime.credentials import bearer_for
from registry.vaults.models import VaultCredential
from registry.vaults.services import secret_of
from tests.support.clients import registry_client
from tests.support.tenants import make_tenant

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def sdk(live_server):
    tenant = make_tenant("sdk")
    return registry_client(live_server.url, tenant.api_key)


def test_agents_through_reference_client(sdk):
    agent = sdk.beta.agents.create(
        name="helper",
        model="claude-sonnet-4-5",
        system="Be brief.",
        tools=[
            {"type": "agent_toolset_20260401"},
            {"type": "custom", "name": "lookup", "description": "Look up", "input_schema": {"type": "object"}},
            {"type": "mcp_toolset", "mcp_server_name": "docs"},
        ],
        mcp_servers=[{"type": "url", "name": "docs", "url": "https://mcp.example.com/mcp"}],
        metadata={"team": "a"},
    )
    assert agent.id.startswith("agent_") and agent.version == 1
    assert agent.model.id == "claude-sonnet-4-5"
    assert [tool.type for tool in agent.tools] == ["agent_toolset_20260401", "custom", "mcp_toolset"]

    updated = sdk.beta.agents.update(agent.id, version=1, system="Be thorough.", metadata={"team": None, "x": "1"})
    assert updated.version == 2 and updated.system == "Be thorough." and updated.metadata == {"x": "1"}
    assert sdk.beta.agents.retrieve(agent.id, version=1).system == "Be brief."
    assert [version.version for version in sdk.beta.agents.versions.list(agent.id)] == [2, 1]

    with pytest.raises(anthropic.ConflictError):
        sdk.beta.agents.update(agent.id, version=1, system="stale")
    with pytest.raises(anthropic.BadRequestError):
        sdk.beta.agents.create(
            name="bad",
            model="m",
            tools=[{"type": "custom", "name": "x", "description": "d", "input_schema": {"type": "array"}}],
        )
    with pytest.raises(anthropic.NotFoundError):
        sdk.beta.agents.retrieve("agent_missing0000000000000000")

    others = [sdk.beta.agents.create(name=f"n{i}", model="m").id for i in range(4)]
    listed = [item.id for item in sdk.beta.agents.list(limit=2)]  # auto-pagination follows next_page
    assert listed == [*others[::-1], agent.id]

    archived = sdk.beta.agents.archive(agent.id)
    assert archived.archived_at is not None
    assert agent.id not in [item.id for item in sdk.beta.agents.list()]
    assert agent.id in [item.id for item in sdk.beta.agents.list(include_archived=True)]


def test_environments_through_reference_client(sdk):
    environment = sdk.beta.environments.create(
        name="py",
        config={
            "type": "cloud",
            "networking": {"type": "limited", "allowed_hosts": ["pypi.org"], "allow_package_managers": True},
            "packages": {"pip": ["requests"]},
        },
    )
    assert environment.id.startswith("env_")
    assert environment.config.packages.pip == ["requests"]
    assert environment.config.networking.type == "limited"

    updated = sdk.beta.environments.update(environment.id, description="Python sandbox")
    assert updated.description == "Python sandbox" and updated.config.packages.pip == ["requests"]
    assert sdk.beta.environments.retrieve(environment.id).description == "Python sandbox"
    assert [item.id for item in sdk.beta.environments.list()] == [environment.id]

    assert sdk.beta.environments.archive(environment.id).archived_at is not None
    deleted = sdk.beta.environments.delete(environment.id)
    assert deleted.id == environment.id and deleted.type == "environment_deleted"
    with pytest.raises(anthropic.NotFoundError):
        sdk.beta.environments.retrieve(environment.id)


def test_vault_credentials_update_in_every_reference_shape(sdk):
    vault = sdk.beta.vaults.create(display_name="keys")
    url = "https://mcp.example.com/mcp"
    bearer = sdk.beta.vaults.credentials.create(
        vault.id, auth={"type": "static_bearer", "token": "old-token", "mcp_server_url": url}
    )
    sdk.beta.vaults.credentials.update(bearer.id, vault_id=vault.id, auth={"type": "static_bearer", "token": "new"})
    workspace_id = VaultCredential.objects.get(pk=bearer.id).workspace_id
    assert bearer_for(workspace_id=workspace_id, vault_ids=[vault.id], server_url=url) == "new"
    assert sdk.beta.vaults.credentials.retrieve(bearer.id, vault_id=vault.id).auth.mcp_server_url == url

    oauth = sdk.beta.vaults.credentials.create(
        vault.id,
        auth={
            "type": "mcp_oauth",
            "access_token": "a1",
            "mcp_server_url": "https://other.example.com/mcp",
            "refresh": {
                "client_id": "c",
                "refresh_token": "r1",
                "token_endpoint": "https://id.example.com/token",
                "token_endpoint_auth": {"type": "client_secret_post", "client_secret": "s1"},
                "scope": "read",
            },
        },
    )
    sdk.beta.vaults.credentials.update(
        oauth.id,
        vault_id=vault.id,
        auth={
            "type": "mcp_oauth",
            "access_token": "a2",
            "refresh": {"scope": "", "token_endpoint_auth": {"type": "client_secret_basic", "client_secret": "s2"}},
        },
    )
    stored = VaultCredential.objects.get(pk=oauth.id)
    assert secret_of(stored, "access_token") == "a2" and secret_of(stored, "refresh.refresh_token") == "r1"
    assert secret_of(stored, "refresh.token_endpoint_auth.client_secret") == "s2"
    assert stored.auth["refresh"]["token_endpoint_auth"]["type"] == "client_secret_post"  # the method stays
    assert stored.auth["refresh"]["scope"] == "" and stored.auth["refresh"]["client_id"] == "c"

    variable = sdk.beta.vaults.credentials.create(
        vault.id,
        auth={
            "type": "environment_variable",
            "secret_name": "API_TOKEN",
            "secret_value": "v1",
            "networking": {"type": "unrestricted"},
        },
    )
    sdk.beta.vaults.credentials.update(
        variable.id,
        vault_id=vault.id,
        auth={"type": "environment_variable", "secret_value": "v2", "injection_location": {"body": True}},
    )
    stored = VaultCredential.objects.get(pk=variable.id)
    assert secret_of(stored, "secret_value") == "v2" and stored.auth["secret_name"] == "API_TOKEN"
    with pytest.raises(anthropic.BadRequestError):
        sdk.beta.vaults.credentials.update(
            variable.id,
            vault_id=vault.id,
            auth={"type": "environment_variable", "injection_location": {"body": False, "header": False}},
        )
    with pytest.raises(anthropic.BadRequestError):
        sdk.beta.vaults.credentials.update(
            bearer.id, vault_id=vault.id, auth={"type": "static_bearer", "mcp_server_url": "https://x.example.com"}
        )
