"""An agent's `multiagent`: validation with field paths, defaults, roster entries pinned to versions, cycles,
replacement on update, the coordinator's effective form, and the roster a session copies."""

from __future__ import annotations

from typing import Any

import anthropic
import pytest
from anthropic.types.beta import (
    BetaManagedAgentsMultiagent20261001,
    BetaManagedAgentsSessionMultiagent20261001,
    BetaManagedAgentsSessionMultiagentSubagentsEnabled,
)

from registry.agents.models import Agent, AgentVersion
from registry.agents.multiagent import effective_multiagent, roster_agents
from tests.support.api_errors import assert_error
from tests.support.clients import registry_client
from tests.support.tenants import make_tenant

DISABLED = {"type": "disabled"}
ENABLED = {"type": "enabled"}
DEFAULT_SUBAGENTS = {"type": "enabled", "inline_agents": ENABLED, "predefined_agents": []}
PREDEFINED = "multiagent.subagents.predefined_agents"


def create(api, **body):
    response = api.post("/v1/agents", {"name": "a", "model": "claude-sonnet-4-5", **body}, format="json")
    assert response.status_code == 200, response.content
    return response.json()


def update(api, agent_id, **body):
    response = api.post(f"/v1/agents/{agent_id}", body, format="json")
    assert response.status_code == 200, response.content
    return response.json()


def with_roster(*entries, inline="enabled"):
    return {
        "type": "multiagent_20261001",
        "subagents": {"type": "enabled", "inline_agents": {"type": inline}, "predefined_agents": list(entries)},
    }


def ref(agent_id, version):
    return {"type": "agent", "id": agent_id, "version": version}


def roster_of(agent):
    return agent["multiagent"]["subagents"]["predefined_agents"]


# -- shapes and defaults ------------------------------------------------------------------------------------
def test_no_multiagent_is_null(api):
    assert create(api)["multiagent"] is None
    assert create(api, multiagent=None)["multiagent"] is None


def test_defaults_fill_the_resolved_shape(api):
    agent = create(api, multiagent={"type": "multiagent_20261001"})
    expected = {
        "type": "multiagent_20261001",
        "advisor": DISABLED,
        "subagents": DEFAULT_SUBAGENTS,
        "workflows": DISABLED,
    }
    assert agent["multiagent"] == expected
    assert BetaManagedAgentsMultiagent20261001.model_validate(agent["multiagent"]).subagents.type == "enabled"
    nulls = create(
        api,
        multiagent={
            "type": "multiagent_20261001",
            "advisor": None,
            "subagents": {"type": "enabled", "inline_agents": None, "predefined_agents": []},
            "workflows": None,  # our decision: disabled, where the reference client's docstring says enabled
        },
    )
    assert nulls["multiagent"] == expected
    advised = create(api, multiagent={"type": "multiagent_20261001", "advisor": {"type": "enabled", "model": "opus"}})
    assert advised["multiagent"]["advisor"] == {"type": "enabled", "model": "opus"}
    disabled = create(api, multiagent={"type": "multiagent_20261001", "subagents": DISABLED, "workflows": DISABLED})
    assert disabled["multiagent"]["subagents"] == DISABLED and disabled["multiagent"]["workflows"] == DISABLED


@pytest.mark.parametrize(
    ("multiagent", "mentions"),
    [
        ({"type": "multiagent_20261001", "workflows": {"type": "enabled"}}, "multiagent.workflows: workflow runs are"),
        ("multiagent_20261001", "multiagent: must be an object"),
        ({"advisor": DISABLED}, "multiagent.type: must be one of ['coordinator', 'multiagent_20261001']"),
        ({"type": "swarm"}, "multiagent.type: must be one of"),
        ({"type": "multiagent_20261001", "colour": "red"}, "multiagent.colour: unknown field"),
        ({"type": "multiagent_20261001", "advisor": {"type": "enabled"}}, "multiagent.advisor.model: must be a model"),
        ({"type": "multiagent_20261001", "advisor": {"type": "enabled", "model": ""}}, "multiagent.advisor.model"),
        ({"type": "multiagent_20261001", "advisor": {"type": "enabled", "model": 4}}, "multiagent.advisor.model"),
        ({"type": "multiagent_20261001", "advisor": {"type": "on"}}, "multiagent.advisor.type"),
        ({"type": "multiagent_20261001", "subagents": {"type": "enabled", "x": 1}}, "multiagent.subagents.x"),
        ({"type": "multiagent_20261001", "subagents": ["enabled"]}, "multiagent.subagents: must be an object"),
        (with_roster(inline="disabled"), f"{PREDEFINED}: must name at least one agent when inline_agents is disabled"),
        (with_roster(inline="sometimes"), "multiagent.subagents.inline_agents.type"),
        (with_roster({"type": "self"}, 5), f"{PREDEFINED}[1]: must be an agent id or an object"),
        (with_roster({"type": "self"}, "not-an-agent"), f"{PREDEFINED}[1]: must be an agent id"),
        (with_roster({"type": "agent"}), f"{PREDEFINED}[0].id: must be an agent id"),
        (with_roster({"type": "agent", "id": "agent_x", "version": 0}), f"{PREDEFINED}[0].version"),
        (with_roster({"type": "agent", "id": "agent_x", "version": "1"}), f"{PREDEFINED}[0].version"),
        (with_roster({"type": "self", "id": "agent_x"}), f"{PREDEFINED}[0].id: unknown field"),
        (with_roster({"type": "advisor", "model": "opus"}), f"{PREDEFINED}[0].type: must be one of ['agent', 'self']"),
        ({"type": "multiagent_20261001", "subagents": {"type": "enabled", "predefined_agents": "x"}}, PREDEFINED),
        ({"type": "coordinator"}, "multiagent.agents: must name 1 to 20 entries"),
        ({"type": "coordinator", "agents": []}, "multiagent.agents: must name 1 to 20 entries"),
        (
            {"type": "coordinator", "agents": [{"type": "advisor", "model": "a"}, {"type": "advisor", "model": "b"}]},
            "multiagent.agents[1]: a roster has at most one advisor entry",
        ),
        ({"type": "coordinator", "agents": [{"type": "advisor"}]}, "multiagent.agents[0].model"),
        ({"type": "coordinator", "agents": [{"type": "self"}], "advisor": DISABLED}, "multiagent.advisor: unknown"),
    ],
)
def test_invalid_shapes_are_400_naming_the_path(api, multiagent, mentions):
    response = api.post("/v1/agents", {"name": "a", "model": "m", "multiagent": multiagent}, format="json")
    assert_error(response, 400, "invalid_request_error", mentions)
    assert Agent.objects.count() == 0


# -- roster entries -----------------------------------------------------------------------------------------
def test_entries_resolve_to_pinned_versions(api):
    helper = create(api, name="helper")
    update(api, helper["id"], system="v2")
    reviewer = create(api, name="reviewer")
    update(api, reviewer["id"], system="v2")
    agent = create(
        api,
        multiagent=with_roster(helper["id"], {"type": "agent", "id": reviewer["id"], "version": 1}, {"type": "self"}),
    )
    assert roster_of(agent) == [ref(helper["id"], 2), ref(reviewer["id"], 1), ref(agent["id"], 1)]
    latest = create(api, multiagent=with_roster({"type": "agent", "id": reviewer["id"]}))
    assert roster_of(latest) == [ref(reviewer["id"], 2)]
    update(api, helper["id"], system="v3")  # a saved roster keeps the version it pinned
    assert roster_of(api.get(f"/v1/agents/{agent['id']}").json())[0] == ref(helper["id"], 2)


def test_unknown_other_workspace_and_archived_agents_are_refused(api, tenant, other_tenant):
    live = create(api, name="live")
    archived = create(api, name="archived")
    api.post(f"/v1/agents/{archived['id']}/archive")
    foreign = create(other_tenant.client, name="foreign")
    missing = "agent_" + "0" * 24

    def refused(entry):
        body = {"name": "a", "model": "m", "multiagent": with_roster(live["id"], entry)}
        response = api.post("/v1/agents", body, format="json")
        return assert_error(response, 400, "invalid_request_error", f"{PREDEFINED}[1]: ")["error"]["message"]

    assert refused(missing) == f"{PREDEFINED}[1]: no agent {missing} in this workspace."
    # Another workspace's agent reads exactly like a missing one.
    assert refused(foreign["id"]) == f"{PREDEFINED}[1]: no agent {foreign['id']} in this workspace."
    assert refused({"type": "agent", "id": foreign["id"], "version": 1}) == refused(foreign["id"])
    assert refused(archived["id"]) == f"{PREDEFINED}[1]: agent {archived['id']} is archived."
    assert refused({"type": "agent", "id": live["id"], "version": 2}).endswith(f"agent {live['id']} has no version 2.")
    assert Agent.objects.filter(workspace=tenant.workspace).count() == 2


def test_more_than_twenty_entries_are_refused(api):
    agents = [create(api, name=f"n{index}")["id"] for index in range(21)]
    assert len(roster_of(create(api, multiagent=with_roster(*agents[:20])))) == 20
    response = api.post("/v1/agents", {"name": "a", "model": "m", "multiagent": with_roster(*agents)}, format="json")
    assert_error(response, 400, "invalid_request_error", f"{PREDEFINED}: at most 20 entries")
    coordinator = {"type": "coordinator", "agents": agents}
    response = api.post("/v1/agents", {"name": "a", "model": "m", "multiagent": coordinator}, format="json")
    assert_error(response, 400, "invalid_request_error", "multiagent.agents: at most 20 entries")


def test_repeated_agents_are_refused(api):
    helper = create(api, name="helper")
    update(api, helper["id"], system="v2")
    both_versions = with_roster(helper["id"], {"type": "agent", "id": helper["id"], "version": 1})
    response = api.post("/v1/agents", {"name": "a", "model": "m", "multiagent": both_versions}, format="json")
    assert_error(response, 400, "invalid_request_error", f"{PREDEFINED}[1]: agent {helper['id']} is already in")
    agent = create(api)
    itself_twice = with_roster({"type": "self"}, agent["id"])
    response = api.post(f"/v1/agents/{agent['id']}", {"multiagent": itself_twice}, format="json")
    assert_error(response, 400, "invalid_request_error", f"{PREDEFINED}[1]: agent {agent['id']} is already in")
    assert Agent.objects.get(pk=agent["id"]).version == 1


# -- cycles and self ----------------------------------------------------------------------------------------
def test_a_cycle_through_another_agent_is_refused_at_update(api):
    b = create(api, name="b")
    a = create(api, name="a", multiagent=with_roster(b["id"]))
    response = api.post(f"/v1/agents/{b['id']}", {"multiagent": with_roster(a["id"])}, format="json")
    assert_error(response, 400, "invalid_request_error", f"{PREDEFINED}[0]: would create a cycle")
    assert f"{b['id']} → {a['id']} → {b['id']}" in response.json()["error"]["message"]
    assert Agent.objects.get(pk=b["id"]).version == 1 and AgentVersion.objects.filter(agent_id=b["id"]).count() == 1


def test_a_longer_cycle_names_every_agent_on_it(api):
    c = create(api, name="c")
    b = create(api, name="b", multiagent=with_roster(c["id"]))
    a = create(api, name="a", multiagent={"type": "coordinator", "agents": [b["id"]]})
    x = create(api, name="x")
    roster = with_roster(x["id"], a["id"])
    response = api.post(f"/v1/agents/{c['id']}", {"multiagent": roster}, format="json")
    body = assert_error(response, 400, "invalid_request_error", f"{PREDEFINED}[1]: would create a cycle")
    assert f"{c['id']} → {a['id']} → {b['id']} → {c['id']}" in body["error"]["message"]


def test_self_is_allowed_and_not_a_cycle(api):
    a = create(api, name="a", multiagent=with_roster({"type": "self"}, inline="disabled"))
    assert roster_of(a) == [ref(a["id"], 1)]
    b = create(api, name="b", multiagent=with_roster(a["id"]))  # a's own entry is not followed back to b
    assert roster_of(b) == [ref(a["id"], 1)]
    direct = update(api, b["id"], multiagent=with_roster(b["id"], a["id"]))  # its own id is a self entry
    assert direct["version"] == 2 and roster_of(direct) == [ref(b["id"], 2), ref(a["id"], 1)]


# -- updates ------------------------------------------------------------------------------------------------
def test_update_replaces_the_field_whole(api):
    helper = create(api, name="helper")
    agent = create(
        api,
        multiagent={
            "type": "multiagent_20261001",
            "advisor": {"type": "enabled", "model": "opus"},
            "subagents": {"type": "enabled", "inline_agents": DISABLED, "predefined_agents": [helper["id"]]},
        },
    )
    renamed = update(api, agent["id"], name="renamed")  # omitted: kept
    assert renamed["version"] == 2 and renamed["multiagent"] == agent["multiagent"]
    replaced = update(api, agent["id"], multiagent={"type": "multiagent_20261001"})
    assert replaced["version"] == 3
    assert replaced["multiagent"]["advisor"] == DISABLED  # defaults, not the stored values
    assert replaced["multiagent"]["subagents"] == DEFAULT_SUBAGENTS
    cleared = update(api, agent["id"], multiagent=None)
    assert cleared["version"] == 4 and cleared["multiagent"] is None
    assert api.get(f"/v1/agents/{agent['id']}", {"version": 2}).json()["multiagent"] == agent["multiagent"]


def test_an_update_resolving_to_the_same_value_keeps_the_version(api):
    helper = create(api, name="helper")
    body = with_roster(helper["id"], {"type": "self"})
    agent = create(api, multiagent=body)
    assert update(api, agent["id"], multiagent=body)["version"] == 1
    assert AgentVersion.objects.filter(agent_id=agent["id"]).count() == 1
    update(api, helper["id"], system="v2")  # the same body now resolves to another version of the helper
    moved = update(api, agent["id"], multiagent=body)
    assert moved["version"] == 2 and roster_of(moved) == [ref(helper["id"], 2), ref(agent["id"], 2)]


def test_self_entries_follow_the_agent_to_each_new_version(api):
    agent = create(api, multiagent=with_roster({"type": "self"}))
    renamed = update(api, agent["id"], name="renamed")
    assert renamed["version"] == 2 and roster_of(renamed) == [ref(agent["id"], 2)]
    assert roster_of(api.get(f"/v1/agents/{agent['id']}", {"version": 1}).json()) == [ref(agent["id"], 1)]


# -- the coordinator ----------------------------------------------------------------------------------------
def test_coordinator_is_stored_resolved_and_has_an_effective_form(api):
    helper = create(api, name="helper")
    agent = create(
        api,
        multiagent={
            "type": "coordinator",
            "agents": [helper["id"], {"type": "advisor", "model": "opus"}, {"type": "self"}],
        },
    )
    advisor = {"type": "advisor", "model": "opus"}
    assert agent["multiagent"] == {
        "type": "coordinator",
        "agents": [ref(helper["id"], 1), advisor, ref(agent["id"], 1)],
    }
    assert effective_multiagent(agent["multiagent"]) == {
        "type": "multiagent_20261001",
        "advisor": {"type": "enabled", "model": "opus"},
        "subagents": {
            "type": "enabled",
            "inline_agents": DISABLED,
            "predefined_agents": [ref(helper["id"], 1), ref(agent["id"], 1)],
        },
        "workflows": DISABLED,
    }
    alone = create(api, multiagent={"type": "coordinator", "agents": [{"type": "advisor", "model": "opus"}]})
    effective = effective_multiagent(alone["multiagent"])
    assert effective is not None and effective["subagents"] == DISABLED


# -- the forms the runtime reads ----------------------------------------------------------------------------
def test_effective_multiagent_normalises_stored_values():
    assert effective_multiagent(None) is None
    assert effective_multiagent({"type": "something_else"}) is None
    subagents: dict[str, Any] = {"type": "enabled", "inline_agents": ENABLED, "predefined_agents": [ref("agent_b", 3)]}
    stored = {"type": "multiagent_20261001", "advisor": DISABLED, "subagents": subagents, "workflows": DISABLED}
    assert effective_multiagent(stored) == stored
    as_session_copies_it = {
        **stored,
        "subagents": {**subagents, "predefined_agents": [{**ref("agent_b", 3), "name": "b", "tools": []}]},
    }
    assert effective_multiagent(as_session_copies_it) == stored


def test_roster_agents_are_full_definitions_at_the_pinned_version(api, tenant, other_tenant):
    helper = create(api, name="helper", system="first", description="helps", tools=[{"type": "agent_toolset_20260401"}])
    update(api, helper["id"], system="second")
    foreign = create(other_tenant.client, name="foreign")
    effective = effective_multiagent(with_roster(ref(foreign["id"], 1), ref(helper["id"], 1)) | {"advisor": DISABLED})
    definitions = roster_agents(tenant.workspace.pk, effective)
    assert [definition["id"] for definition in definitions] == [helper["id"]]  # another workspace's is left out
    definition = definitions[0]
    assert set(definition) == {
        *("type", "id", "version", "name", "description", "model", "system", "tools", "mcp_servers", "skills"),
        "execution_identity",
    }
    assert definition["version"] == 1 and definition["system"] == "first" and definition["description"] == "helps"
    assert definition["tools"] == helper["tools"] and definition["model"] == helper["model"]
    assert roster_agents(tenant.workspace.pk, None) == []
    assert roster_agents(tenant.workspace.pk, effective_multiagent({"type": "multiagent_20261001"})) == []


def test_a_session_copies_the_roster_as_full_definitions(api):
    helper = create(api, name="helper", system="first")
    agent = create(api, multiagent=with_roster(helper["id"], {"type": "self"}))
    update(api, helper["id"], system="second")
    environment = api.post("/v1/environments", {"name": "e"}, format="json").json()
    response = api.post("/v1/sessions", {"agent": agent["id"], "environment_id": environment["id"]}, format="json")
    assert response.status_code == 200, response.content
    multiagent = response.json()["agent"]["multiagent"]
    first, itself = multiagent["subagents"]["predefined_agents"]
    assert first["id"] == helper["id"] and first["version"] == 1 and first["system"] == "first"
    assert first["name"] == "helper" and first["type"] == "agent" and "multiagent" not in first
    assert itself["id"] == agent["id"] and itself["version"] == 1
    assert multiagent["advisor"] == DISABLED and multiagent["workflows"] == DISABLED
    session = BetaManagedAgentsSessionMultiagent20261001.model_validate(multiagent)
    assert session.subagents.type == "enabled" and session.subagents.predefined_agents[0].name == "helper"
    plain = create(api, name="plain")
    body = {"agent": plain["id"], "environment_id": environment["id"]}
    assert api.post("/v1/sessions", body, format="json").json()["agent"]["multiagent"] is None


@pytest.mark.django_db(transaction=True)
def test_through_the_reference_client(live_server):
    sdk = registry_client(live_server.url, make_tenant("sdk").api_key)
    helper = sdk.beta.agents.create(name="helper", model="claude-sonnet-4-5")
    agent = sdk.beta.agents.create(
        name="lead",
        model="claude-sonnet-4-5",
        multiagent={"type": "multiagent_20261001", "subagents": {"type": "enabled", "predefined_agents": [helper.id]}},
    )
    assert isinstance(agent.multiagent, BetaManagedAgentsMultiagent20261001)
    assert agent.multiagent.subagents.type == "enabled"
    assert [(item.id, item.version) for item in agent.multiagent.subagents.predefined_agents] == [(helper.id, 1)]
    assert agent.multiagent.workflows.type == "disabled"
    with pytest.raises(anthropic.BadRequestError, match=r"multiagent\.workflows"):
        sdk.beta.agents.update(agent.id, multiagent={"type": "multiagent_20261001", "workflows": {"type": "enabled"}})
    environment = sdk.beta.environments.create(name="e")
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=environment.id)
    copied = session.agent.multiagent
    assert isinstance(copied, BetaManagedAgentsSessionMultiagent20261001)
    assert isinstance(copied.subagents, BetaManagedAgentsSessionMultiagentSubagentsEnabled)
    assert [item.name for item in copied.subagents.predefined_agents] == ["helper"]
