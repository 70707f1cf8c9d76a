"""Agents: every field of the reference type, versions, the optimistic lock, validation."""

from __future__ import annotations

import pytest

from registry.agents.models import Agent, AgentVersion
from tests.support.api_errors import assert_error

CUSTOM_TOOL = {
    "type": "custom",
    "name": "get_weather",
    "description": "Weather for a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
FULL_AGENT = {
    "name": "researcher",
    "description": "Finds things",
    "model": {"id": "claude-sonnet-4-5", "effort": "low", "speed": "fast", "inference_geo": "us"},
    "system": "You are careful.",
    "tools": [
        {
            "type": "agent_toolset_20260401",
            "configs": [{"name": "bash", "permission_policy": {"type": "always_ask"}}],
            "default_config": {"enabled": True},
        },
        {"type": "mcp_toolset", "mcp_server_name": "docs"},
        CUSTOM_TOOL,
    ],
    "mcp_servers": [{"type": "url", "name": "docs", "url": "https://mcp.example.com/sse"}],
    "skills": [{"type": "anthropic", "skill_id": "xlsx"}],
    "metadata": {"team": "search"},
    "execution_identity": {"type": "aws_role", "role_arn": "arn:aws:iam::123456789012:role/runner"},
}


def create(api, body):
    response = api.post("/v1/agents", body, format="json")
    assert response.status_code == 200, response.content
    return response.json()


def test_create_returns_complete_object(api):
    agent = create(api, FULL_AGENT)
    assert agent["id"].startswith("agent_") and len(agent["id"]) >= len("agent_") + 20
    assert agent["type"] == "agent" and agent["version"] == 1
    assert agent["model"] == {
        "id": "claude-sonnet-4-5",
        "effort": {"type": "low"},
        "inference_geo": "us",
        "speed": "fast",
    }
    toolset, mcp_toolset, custom = agent["tools"]
    assert toolset["configs"] == [
        {"name": "bash", "type": "bash", "enabled": True, "permission_policy": {"type": "always_ask"}}
    ]
    assert toolset["default_config"] == {"enabled": True, "permission_policy": {"type": "always_allow"}}
    assert mcp_toolset["default_config"]["permission_policy"] == {"type": "always_ask"}
    assert custom == CUSTOM_TOOL
    assert agent["skills"] == [{"type": "anthropic", "skill_id": "xlsx", "version": "latest"}]
    assert agent["execution_identity"]["type"] == "aws_role"
    assert agent["archived_at"] is None
    assert api.get(f"/v1/agents/{agent['id']}").json() == agent


def test_model_string_gets_defaults(api):
    agent = create(api, {"name": "a", "model": "claude-haiku-4-5"})
    assert agent["model"]["id"] == "claude-haiku-4-5"
    assert agent["model"]["speed"] == "standard"
    assert agent["tools"] == [] and agent["metadata"] == {} and agent["system"] is None
    assert agent["execution_identity"] == {"type": "service_account"}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"model": "m"}, "name"),
        ({"name": "a"}, "model"),
        ({"name": "a", "model": "m", "colour": "red"}, "colour"),
        ({"name": "a", "model": {"id": "m", "effort": "extreme"}}, "effort"),
        ({"name": "a", "model": "m", "tools": [{"type": "hammer"}]}, "tools"),
        ({"name": "a", "model": "m", "tools": [{**CUSTOM_TOOL, "name": "bad name!"}]}, "name"),
        (
            {
                "name": "a",
                "model": "m",
                "tools": [{**CUSTOM_TOOL, "input_schema": {"type": "object", "properties": {"x": {"type": 7}}}}],
            },
            "input_schema",
        ),
        ({"name": "a", "model": "m", "tools": [{**CUSTOM_TOOL, "input_schema": {"type": "string"}}]}, "input_schema"),
        ({"name": "a", "model": "m", "tools": [CUSTOM_TOOL, CUSTOM_TOOL]}, "unique"),
        (
            {"name": "a", "model": "m", "mcp_servers": [{"type": "url", "name": "x", "url": "http://mcp:8080/mcp"}]},
            "not referenced",
        ),
        ({"name": "a", "model": "m", "mcp_servers": [{"type": "url", "name": "x", "url": "ftp://mcp/x"}]}, "url"),
        ({"name": "a", "model": "m", "tools": [{"type": "mcp_toolset", "mcp_server_name": "ghost"}]}, "ghost"),
        ({"name": "a", "model": "m", "metadata": {f"k{i}": "v" for i in range(17)}}, "metadata"),
        ({"name": "a", "model": "m", "metadata": {"k": "v" * 513}}, "metadata"),
        ({"name": "a", "model": "m", "execution_identity": {"type": "aws_role", "role_arn": "nope"}}, "role_arn"),
        (
            {
                "name": "a",
                "model": "m",
                "tools": [{"type": "agent_toolset_20260401", "configs": [{"name": "teleport"}]}],
            },
            "name",
        ),
    ],
)
def test_invalid_bodies_are_400_and_write_nothing(api, body, field):
    assert_error(api.post("/v1/agents", body, format="json"), 400, "invalid_request_error", field)
    assert Agent.objects.count() == 0


def test_update_creates_version_and_keeps_history(api):
    agent = create(api, FULL_AGENT)
    updated = api.post(f"/v1/agents/{agent['id']}", {"system": "New prompt", "version": 1}, format="json").json()
    assert updated["version"] == 2 and updated["system"] == "New prompt"
    assert updated["tools"] == agent["tools"]  # omitted fields keep their value
    old = api.get(f"/v1/agents/{agent['id']}", {"version": 1}).json()
    assert old["version"] == 1 and old["system"] == "You are careful."
    versions = api.get(f"/v1/agents/{agent['id']}/versions").json()
    assert [v["version"] for v in versions["data"]] == [2, 1]
    assert AgentVersion.objects.filter(agent_id=agent["id"]).count() == 2


def test_stale_version_is_409(api):
    agent = create(api, {"name": "a", "model": "m"})
    api.post(f"/v1/agents/{agent['id']}", {"system": "x"}, format="json")
    response = api.post(f"/v1/agents/{agent['id']}", {"system": "y", "version": 1}, format="json")
    assert_error(response, 409, "conflict_error", "version")
    assert api.get(f"/v1/agents/{agent['id']}").json()["system"] == "x"


def test_metadata_merges_and_null_removes(api):
    agent = create(api, {"name": "a", "model": "m", "metadata": {"keep": "1", "drop": "2"}})
    updated = api.post(f"/v1/agents/{agent['id']}", {"metadata": {"drop": None, "add": "3"}}, format="json").json()
    assert updated["metadata"] == {"keep": "1", "add": "3"}


def test_arrays_are_replaced_whole_and_null_clears(api):
    agent = create(api, FULL_AGENT)
    replaced = api.post(f"/v1/agents/{agent['id']}", {"tools": [CUSTOM_TOOL], "mcp_servers": []}, format="json").json()
    assert replaced["tools"] == [CUSTOM_TOOL] and replaced["mcp_servers"] == []
    cleared = api.post(f"/v1/agents/{agent['id']}", {"tools": None}, format="json").json()
    assert cleared["tools"] == []


def test_noop_update_keeps_version(api):
    agent = create(api, {"name": "a", "model": "m"})
    same = api.post(f"/v1/agents/{agent['id']}", {"name": "a"}, format="json").json()
    assert same["version"] == 1


def test_update_validates_resulting_agent(api):
    agent = create(api, FULL_AGENT)
    response = api.post(f"/v1/agents/{agent['id']}", {"tools": [CUSTOM_TOOL]}, format="json")
    assert_error(response, 400, "invalid_request_error", "not referenced")
    assert api.get(f"/v1/agents/{agent['id']}").json()["version"] == 1


def test_missing_version_is_404_and_bad_version_400(api):
    agent = create(api, {"name": "a", "model": "m"})
    assert_error(api.get(f"/v1/agents/{agent['id']}", {"version": 9}), 404, "not_found_error")
    assert_error(api.get(f"/v1/agents/{agent['id']}", {"version": "x"}), 400, "invalid_request_error", "version")


def test_archive_sets_archived_at_once(api):
    agent = create(api, {"name": "a", "model": "m"})
    first = api.post(f"/v1/agents/{agent['id']}/archive").json()
    assert first["archived_at"] is not None
    assert api.post(f"/v1/agents/{agent['id']}/archive").json()["archived_at"] == first["archived_at"]


def test_agents_cannot_be_deleted(api):
    agent = create(api, {"name": "a", "model": "m"})
    assert_error(api.delete(f"/v1/agents/{agent['id']}"), 405, "invalid_request_error")


def test_workspace_id_in_body_is_ignored(api, other_tenant):
    response = api.post(
        "/v1/agents", {"name": "a", "model": "m", "workspace_id": other_tenant.workspace.id}, format="json"
    )
    assert_error(response, 400, "invalid_request_error", "workspace_id")
