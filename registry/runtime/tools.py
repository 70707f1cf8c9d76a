"""The tools a turn offers the model: the agent's custom tools, its built-in toolset (run in the
session's sandbox), and its MCP servers' tools, each gated by its toolset's permission policy.

Built-in tools are offered only when a sandbox backend is available; a disabled one is never offered.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from registry.runtime.mcp_client import McpTool, McpUnavailable
from registry.sandbox.toolset import model_definition, offered_tools

logger = logging.getLogger(__name__)

ToolLister = Callable[[str, str], list[McpTool]]


@dataclass(frozen=True)
class GatedTool:
    """A tool the runtime runs, and the permission policy that gates it."""

    policy: str

    @property
    def evaluated_permission(self) -> str:
        """`always_ask` pauses for a confirmation; `always_allow` and `auto` run at once."""
        return "ask" if self.policy == "always_ask" else "allow"

    def evaluation(self) -> dict[str, Any]:
        if self.policy == "auto":
            return {"type": "auto", "evaluated_permission": self.evaluated_permission}
        return {"type": self.policy}


@dataclass(frozen=True)
class McpEntry(GatedTool):
    """An MCP tool the model may call, with the server's URL."""

    tool: McpTool
    url: str


@dataclass(frozen=True)
class BuiltinEntry(GatedTool):
    """A built-in tool of the agent's toolset (run in the session's sandbox)."""

    name: str


@dataclass
class ToolCatalog:
    """Custom, built-in and MCP tools by the name the model sees, plus the servers that failed to list."""

    custom: dict[str, dict[str, Any]] = field(default_factory=dict)
    builtin: dict[str, BuiltinEntry] = field(default_factory=dict)
    disabled_builtin: set[str] = field(default_factory=set)
    mcp: dict[str, McpEntry] = field(default_factory=dict)
    failures: list[tuple[str, McpUnavailable]] = field(default_factory=list)
    # Tools the runtime answers itself (a thread's multi-agent tools), with their definitions.
    runtime: dict[str, BuiltinEntry] = field(default_factory=dict)
    runtime_definitions: list[dict[str, Any]] = field(default_factory=list)

    def add_runtime_tools(self, definitions: list[dict[str, Any]]) -> None:
        """Always allowed; they shadow a custom or MCP tool of the same name."""
        for definition in definitions:
            name = definition["name"]
            self.custom.pop(name, None)
            self.mcp.pop(name, None)
            self.runtime[name] = BuiltinEntry(policy="always_allow", name=name)
        self.runtime_definitions.extend(definitions)

    def model_tools(self) -> list[dict[str, Any]]:
        """The `tools` of a vendor-B request."""
        tools = [
            {"name": name, "description": tool.get("description", ""), "input_schema": tool["input_schema"]}
            for name, tool in self.custom.items()
        ]
        tools.extend(model_definition(name) for name in self.builtin)
        tools.extend(self.runtime_definitions)
        tools.extend(
            {"name": name, "description": entry.tool.description, "input_schema": entry.tool.input_schema}
            for name, entry in self.mcp.items()
        )
        return tools


def tool_config(toolset: dict[str, Any], tool_name: str) -> dict[str, Any]:
    """The per-tool config of an MCP toolset, falling back to its `default_config`."""
    default = toolset.get("default_config") or {}
    for config in toolset.get("configs") or []:
        if config.get("name") == tool_name:
            return {**default, **{key: value for key, value in config.items() if value is not None}}
    return default


def wants_builtin_tools(agent: dict[str, Any]) -> bool:
    return any(tool["type"] == "agent_toolset_20260401" for tool in agent.get("tools") or [])


# The built-in tools the reference client's environment worker runs (its `beta_agent_toolset_20260401`): a
# session whose tools it runs is offered these (no web_fetch or web_search, which no one would answer).
WORKER_TOOLS = ("bash", "read", "write", "edit", "glob", "grep")


def builtin_tools_for(*, own_sandbox: bool, client_runs: bool) -> tuple[str, ...]:
    """The built-in tools a session is offered: the worker's when the client runs them, this deployment's
    when this runtime has a sandbox, else none."""
    if client_runs:
        return WORKER_TOOLS
    return offered_tools() if own_sandbox else ()


def _add_builtin_tools(catalog: ToolCatalog, agent: dict[str, Any], names: tuple[str, ...]) -> None:
    """The agent's built-in toolset: enabled tools default to `always_allow`."""
    for toolset in agent.get("tools") or []:
        if toolset["type"] != "agent_toolset_20260401":
            continue
        for name in names:
            config = tool_config(toolset, name)
            if config.get("enabled") is False:
                catalog.disabled_builtin.add(name)
                continue
            policy = (config.get("permission_policy") or {}).get("type") or "always_allow"
            catalog.builtin[name] = BuiltinEntry(policy=policy, name=name)


def build_catalog(agent: dict[str, Any], list_tools: ToolLister, *, builtin: tuple[str, ...]) -> ToolCatalog:
    """List every MCP toolset's server (one that fails is recorded, its tools left out), and the agent's
    built-in toolset among the `builtin` names (`builtin_tools_for`)."""
    catalog = ToolCatalog(custom={tool["name"]: tool for tool in agent.get("tools") or [] if tool["type"] == "custom"})
    _add_builtin_tools(catalog, agent, builtin)
    urls = {server["name"]: server["url"] for server in agent.get("mcp_servers") or []}
    for toolset in agent.get("tools") or []:
        if toolset["type"] != "mcp_toolset" or toolset["mcp_server_name"] not in urls:
            continue
        server_name = toolset["mcp_server_name"]
        try:
            listed = list_tools(server_name, urls[server_name])
        except McpUnavailable as error:
            catalog.failures.append((server_name, error))
            continue
        for tool in listed:
            _add_mcp_tool(catalog, toolset, tool, urls[server_name])
    return catalog


def _add_mcp_tool(catalog: ToolCatalog, toolset: dict[str, Any], tool: McpTool, url: str) -> None:
    config = tool_config(toolset, tool.name)
    if config.get("enabled") is False:
        return
    if tool.name in catalog.custom or tool.name in catalog.mcp or tool.name in catalog.builtin:
        logger.warning("MCP tool %s of %s is shadowed by another tool of that name", tool.name, tool.server_name)
        return
    policy = (config.get("permission_policy") or {}).get("type") or "always_ask"
    catalog.mcp[tool.name] = McpEntry(tool=tool, url=url, policy=policy)
