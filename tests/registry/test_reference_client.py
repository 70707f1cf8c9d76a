"""The reference client (anthropic 2.10.0) drives agents and environments against a live registry."""

from __future__ import annotations

import anthropic
import pytest

from tests.conftest import make_tenant

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def sdk(live_server):
    tenant = make_tenant("sdk")
    return anthropic.Anthropic(
        base_url=live_server.url,
        api_key=None,
        auth_token=None,
        default_headers={"x-api-key": tenant.api_key},
        max_retries=0,
    )


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
