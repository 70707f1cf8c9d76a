"""An agent's `multiagent` field: the shapes a create or update may send, their resolution to pinned agent
versions (no unknown, archived or repeated agents, no cycle through another agent), and the forms sessions and
the runtime read (`effective_multiagent`, `roster_agents`, `session_multiagent`)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import reduce
from operator import or_
from typing import Any, NoReturn

from django.db.models import Q
from rest_framework import serializers

from registry.agents.models import Agent, AgentVersion

MULTIAGENT = "multiagent_20261001"
COORDINATOR = "coordinator"
MAX_ROSTER = 20
AGENT_ID = re.compile(r"^agent_[A-Za-z0-9_-]{1,58}$")
MODEL_MAX = 256
WALK_BATCH = 200  # agent versions read per query: a long OR is one expression level per term on SQLite
# The agent as a session thread runs it (`BetaManagedAgentsSessionThreadAgent`): the session's snapshot of the
# agent without its metadata and without the roster, which a thread does not repeat.
THREAD_AGENT_FIELDS = ("name", "description", "model", "system", "tools", "mcp_servers", "skills", "execution_identity")
MEMBER_FIELDS = ("inline_agents", "predefined_agents")

Node = tuple[str, int]


def _refuse(path: str, message: str) -> NoReturn:
    raise serializers.ValidationError({path: [message]})


def _disabled() -> dict[str, Any]:
    return {"type": "disabled"}


def _reference(agent_id: str, version: int) -> dict[str, Any]:
    return {"type": "agent", "id": agent_id, "version": version}


def _is_reference(entry: Any) -> bool:
    """A pinned agent reference (or a full agent definition, which carries one)."""
    return (
        isinstance(entry, dict)
        and entry.get("type") == "agent"
        and isinstance(entry.get("id"), str)
        and isinstance(entry.get("version"), int)
    )


# -- the shapes a body may send ------------------------------------------------------------------------------
def _tagged(value: Any, path: str, fields: dict[str, tuple[str, ...]]) -> str:
    """The `type` of the object `value`, one of `fields`' keys, whose other keys are that type's fields."""
    if not isinstance(value, dict):
        _refuse(path, "must be an object with a 'type'.")
    kind = value.get("type")
    if not isinstance(kind, str) or kind not in fields:
        _refuse(f"{path}.type", f"must be one of {sorted(fields)}.")
    unknown = sorted(set(value) - {"type", *fields[kind]})
    if unknown:
        _refuse(f"{path}.{unknown[0]}", "unknown field.")
    return kind


def _model(value: Any, path: str) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > MODEL_MAX:
        _refuse(path, f"must be a model id (a non-empty string of at most {MODEL_MAX} characters).")
    return value


def _agent_id(value: Any, path: str) -> str:
    if not isinstance(value, str) or not AGENT_ID.match(value):
        _refuse(path, "must be an agent id (agent_...).")
    return value


def _entry(value: Any, path: str, *, advisors: bool) -> dict[str, Any]:
    """A roster entry: an agent id, `{"type": "agent", "id", "version"?}`, `{"type": "self"}`, or (in a
    coordinator's roster) `{"type": "advisor", "model"}`."""
    if isinstance(value, str):
        return {"type": "agent", "id": _agent_id(value, path), "version": None}
    if not isinstance(value, dict):
        _refuse(path, "must be an agent id or an object with a 'type'.")
    kinds: dict[str, tuple[str, ...]] = {"agent": ("id", "version"), "self": ()}
    if advisors:
        kinds["advisor"] = ("model",)
    kind = _tagged(value, path, kinds)
    if kind == "self":
        return {"type": "self"}
    if kind == "advisor":
        return {"type": "advisor", "model": _model(value.get("model"), f"{path}.model")}
    version = value.get("version")
    if version is not None and (isinstance(version, bool) or not isinstance(version, int) or version < 1):
        _refuse(f"{path}.version", "must be an integer of at least 1.")
    return {"type": "agent", "id": _agent_id(value.get("id"), f"{path}.id"), "version": version}


def _roster(value: Any, path: str, *, advisors: bool) -> list[dict[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list):
        _refuse(path, "must be a list.")
    if len(value) > MAX_ROSTER:
        _refuse(path, f"at most {MAX_ROSTER} entries.")
    return [_entry(item, f"{path}[{index}]", advisors=advisors) for index, item in enumerate(value)]


def _advisor(value: Any) -> dict[str, Any]:
    path = "multiagent.advisor"
    if value is None or _tagged(value, path, {"enabled": ("model",), "disabled": ()}) == "disabled":
        return _disabled()
    return {"type": "enabled", "model": _model(value.get("model"), f"{path}.model")}


def _subagents(value: Any) -> dict[str, Any]:
    path = "multiagent.subagents"
    if value is None:
        value = {"type": "enabled"}
    if _tagged(value, path, {"enabled": MEMBER_FIELDS, "disabled": ()}) == "disabled":
        return _disabled()
    inline = value.get("inline_agents")
    inline_kind = (
        "enabled" if inline is None else _tagged(inline, f"{path}.inline_agents", {"enabled": (), "disabled": ()})
    )
    agents = _roster(value.get("predefined_agents"), f"{path}.predefined_agents", advisors=False)
    if inline_kind == "disabled" and not agents:
        _refuse(f"{path}.predefined_agents", "must name at least one agent when inline_agents is disabled.")
    return {"type": "enabled", "inline_agents": {"type": inline_kind}, "predefined_agents": agents}


def _workflows(value: Any) -> dict[str, Any]:
    path = "multiagent.workflows"
    if value is None or _tagged(value, path, {"enabled": MEMBER_FIELDS, "disabled": ()}) == "disabled":
        return _disabled()
    _refuse(path, "workflow runs are not supported; send null or {'type': 'disabled'}.")


def _coordinator(value: dict[str, Any]) -> dict[str, Any]:
    path = "multiagent.agents"
    agents = _roster(value.get("agents"), path, advisors=True)
    if not agents:
        _refuse(path, f"must name 1 to {MAX_ROSTER} entries.")
    advisors = [index for index, entry in enumerate(agents) if entry["type"] == "advisor"]
    if len(advisors) > 1:
        _refuse(f"{path}[{advisors[1]}]", "a roster has at most one advisor entry.")
    return {"type": COORDINATOR, "agents": agents}


def parse(value: Any) -> dict[str, Any] | None:
    """The `multiagent` of a create or update body, checked, with its defaults filled (workflows are always
    disabled); roster entries keep their sent form until `resolve` pins them. 400 naming the field path."""
    if value is None:
        return None
    kind = _tagged(value, "multiagent", {MULTIAGENT: ("advisor", "subagents", "workflows"), COORDINATOR: ("agents",)})
    if kind == COORDINATOR:
        return _coordinator(value)
    return {
        "type": MULTIAGENT,
        "advisor": _advisor(value.get("advisor")),
        "subagents": _subagents(value.get("subagents")),
        "workflows": _workflows(value.get("workflows")),
    }


# -- resolution to pinned versions ---------------------------------------------------------------------------
def _rosters(value: dict[str, Any]) -> Iterable[tuple[str, list[dict[str, Any]]]]:
    """(path, entries) of each roster of a parsed or stored value."""
    if value.get("type") == COORDINATOR:
        yield "multiagent.agents", value.get("agents") or []
        return
    for member in ("subagents", "workflows"):
        settings = value.get(member) or {}
        if settings.get("type") == "enabled":
            yield f"multiagent.{member}.predefined_agents", settings.get("predefined_agents") or []


def _pin(entry: dict[str, Any], path: str, found: dict[str, Agent], *, agent_id: str, version: int) -> dict[str, Any]:
    if entry["type"] == "self" or entry["id"] == agent_id:
        wanted = entry.get("version") or version
        if wanted > version:
            _refuse(path, f"agent {agent_id} has no version {wanted}.")
        return _reference(agent_id, wanted)
    agent = found.get(entry["id"])
    if agent is None:  # another workspace's agent reads exactly like a missing one
        _refuse(path, f"no agent {entry['id']} in this workspace.")
    if agent.archived_at is not None:
        _refuse(path, f"agent {agent.id} is archived.")
    wanted = entry["version"] or agent.version
    if wanted > agent.version:  # every version from 1 to the current one is kept
        _refuse(path, f"agent {agent.id} has no version {wanted}.")
    return _reference(agent.id, wanted)


def _pinned(
    entries: list[dict[str, Any]], path: str, *, workspace_id: str, agent_id: str, version: int
) -> list[dict[str, Any]]:
    named = {entry["id"] for entry in entries if entry["type"] == "agent"} - {agent_id}
    found = Agent.objects.filter(workspace_id=workspace_id, pk__in=named).in_bulk()
    pinned: list[dict[str, Any]] = []
    first_of: dict[str, int] = {}
    for index, entry in enumerate(entries):
        where = f"{path}[{index}]"
        if entry["type"] == "advisor":
            pinned.append(dict(entry))
            continue
        reference = _pin(entry, where, found, agent_id=agent_id, version=version)
        if reference["id"] in first_of:
            _refuse(where, f"agent {reference['id']} is already in the roster at [{first_of[reference['id']]}].")
        first_of[reference["id"]] = index
        pinned.append(reference)
    return pinned


def _versions(workspace_id: str, nodes: list[Node]) -> dict[Node, dict[str, Any]]:
    """The specs of these agent versions of the workspace, a query per `WALK_BATCH` of them."""
    specs: dict[Node, dict[str, Any]] = {}
    for start in range(0, len(nodes), WALK_BATCH):
        matches = reduce(
            or_, (Q(agent_id=agent_id, version=version) for agent_id, version in nodes[start : start + WALK_BATCH])
        )
        rows = AgentVersion.objects.filter(agent__workspace_id=workspace_id).filter(matches)
        specs.update({(row.agent_id, row.version): row.spec for row in rows})
    return specs


def _check_cycles(value: dict[str, Any], *, workspace_id: str, agent_id: str) -> None:
    """400 naming the entry when following pinned rosters from it (breadth first, each agent version once)
    reaches `agent_id` again through another agent. Its own entries are not roots: `self` is allowed."""
    parents: dict[Node, Node | None] = {}
    entry_of: dict[Node, str] = {}
    for path, entries in _rosters(value):
        for index, entry in enumerate(entries):
            if entry["type"] == "agent" and entry["id"] != agent_id:
                node = (entry["id"], entry["version"])
                parents[node] = None
                entry_of[node] = f"{path}[{index}]"
    frontier = list(parents)
    while frontier:
        following: list[Node] = []
        for node, spec in _versions(workspace_id, frontier).items():
            for reference in references(effective_multiagent(spec.get("multiagent"))):
                if reference["id"] == agent_id:
                    trail = [node]
                    while (parent := parents[trail[-1]]) is not None:
                        trail.append(parent)
                    names = " → ".join([agent_id, *(step[0] for step in reversed(trail)), agent_id])
                    _refuse(entry_of[trail[-1]], f"would create a cycle {names}.")
                target = (reference["id"], reference["version"])
                if target not in parents:
                    parents[target] = node
                    following.append(target)
        frontier = following


def resolve(value: dict[str, Any] | None, *, workspace_id: str, agent_id: str, version: int) -> dict[str, Any] | None:
    """`value` (from `parse`) as stored: every roster entry pinned to `{"type": "agent", "id", "version"}`, the
    agent's own entries (`self`, or its id without a version) at `version`, another agent's at the version named
    or its current one. 400 naming the entry for an unknown (or another workspace's) or archived agent, a
    version that does not exist, a repeated agent, or a cycle through another agent."""
    if value is None:
        return None
    resolved = {**value}
    for path, entries in _rosters(value):
        pinned = _pinned(entries, path, workspace_id=workspace_id, agent_id=agent_id, version=version)
        if value["type"] == COORDINATOR:
            resolved["agents"] = pinned
        else:
            member = path.split(".")[1]
            resolved[member] = {**value[member], "predefined_agents": pinned}
    _check_cycles(resolved, workspace_id=workspace_id, agent_id=agent_id)
    return resolved


def follow_self(value: dict[str, Any] | None, *, agent_id: str, previous: int, saved: int) -> dict[str, Any] | None:
    """A stored `value` for the agent's new version `saved`: its entries pinning the agent itself at `previous`
    (the version they were saved with, i.e. its `self` entries) now pin `saved`."""
    if value is None:
        return None

    def moved(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [
            _reference(agent_id, saved)
            if _is_reference(entry) and entry["id"] == agent_id and entry["version"] == previous
            else entry
            for entry in entries
        ]

    followed = {**value}
    for path, entries in _rosters(value):
        if value.get("type") == COORDINATOR:
            followed["agents"] = moved(entries)
        else:
            member = path.split(".")[1]
            followed[member] = {**value[member], "predefined_agents": moved(entries)}
    return followed


# -- the forms sessions and the runtime read -----------------------------------------------------------------
def _effective_member(settings: dict[str, Any] | None) -> dict[str, Any]:
    if not settings or settings.get("type") != "enabled":
        return _disabled()
    return {
        "type": "enabled",
        "inline_agents": {"type": (settings.get("inline_agents") or {}).get("type", "enabled")},
        "predefined_agents": [
            _reference(entry["id"], entry["version"])
            for entry in settings.get("predefined_agents") or []
            if _is_reference(entry)
        ],
    }


def effective_multiagent(spec_multiagent: dict[str, Any] | None) -> dict[str, Any] | None:
    """The stored `multiagent` (an agent's, or a session's copy with full agent definitions) in the resolved
    `multiagent_20261001` shape with agent references: a coordinator's agents become its predefined subagents
    (inline agents disabled) and its advisor entry the advisor. None when the agent has none."""
    if not isinstance(spec_multiagent, dict) or spec_multiagent.get("type") not in (MULTIAGENT, COORDINATOR):
        return None
    if spec_multiagent["type"] == MULTIAGENT:
        advisor = spec_multiagent.get("advisor") or {}
        return {
            "type": MULTIAGENT,
            "advisor": {"type": "enabled", "model": advisor.get("model")}
            if advisor.get("type") == "enabled"
            else _disabled(),
            "subagents": _effective_member(spec_multiagent.get("subagents")),
            "workflows": _effective_member(spec_multiagent.get("workflows")),
        }
    entries = spec_multiagent.get("agents") or []
    agents = [entry for entry in entries if _is_reference(entry)]
    model = next(
        (entry.get("model") for entry in entries if isinstance(entry, dict) and entry.get("type") == "advisor"), None
    )
    subagents = {"type": "enabled", "inline_agents": _disabled(), "predefined_agents": agents}
    return {
        "type": MULTIAGENT,
        "advisor": _disabled() if model is None else {"type": "enabled", "model": model},
        "subagents": _effective_member(subagents) if agents else _disabled(),
        "workflows": _disabled(),
    }


def references(effective: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The agent references of an effective value's predefined agents (subagents, then workflows)."""
    if effective is None:
        return []
    return [entry for _, entries in _rosters(effective) for entry in entries]


def agent_definition(agent_id: str, version: int, spec: dict[str, Any]) -> dict[str, Any]:
    """The agent at one version as a session thread runs it (`BetaManagedAgentsSessionThreadAgent`)."""
    return {"type": "agent", "id": agent_id, "version": version, **{key: spec.get(key) for key in THREAD_AGENT_FIELDS}}


def roster_agents(workspace_id: str, effective: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The full definition of each predefined subagent of `effective` at its pinned version, in roster order
    (a reference outside the workspace is left out)."""
    if effective is None or effective["subagents"]["type"] != "enabled":
        return []
    pinned = [(entry["id"], entry["version"]) for entry in effective["subagents"]["predefined_agents"]]
    specs = _versions(workspace_id, pinned)
    return [
        agent_definition(agent_id, version, specs[agent_id, version])
        for agent_id, version in pinned
        if (agent_id, version) in specs
    ]


def session_multiagent(workspace_id: str, spec_multiagent: dict[str, Any] | None) -> dict[str, Any] | None:
    """The `multiagent` a session copies at creation (`BetaManagedAgentsSessionMultiagent20261001`): the
    effective value with its predefined subagents as full agent definitions."""
    effective = effective_multiagent(spec_multiagent)
    if effective is not None and effective["subagents"]["type"] == "enabled":
        effective["subagents"]["predefined_agents"] = roster_agents(workspace_id, effective)
    return effective
