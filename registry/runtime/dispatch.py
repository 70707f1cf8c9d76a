"""Tool dispatch: the turn's tool catalog, what each tool call the model makes becomes in the log
(built-in, MCP, custom for the client, denied), and running the calls the runtime answers (built-in
tools in the sandbox, MCP tools over HTTP), confirmations denied by the client answered with an error."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from registry.runtime import mcp_client
from registry.runtime.checkpoints import Checkpoints
from registry.runtime.config import RuntimeSettings
from registry.runtime.credentials import bearer_for
from registry.runtime.observer import ToolWatch
from registry.runtime.running import RunningSession
from registry.runtime.sandboxing import SandboxUse
from registry.runtime.threads import ThreadTools
from registry.runtime.tools import BuiltinEntry, McpEntry, ToolCatalog, build_catalog, builtin_tools_for
from registry.runtime.transcript import INTERRUPTED_RESULT, answered_calls
from registry.runtime.writer import TurnLog
from registry.sandbox.toolset import ToolOutcome
from registry.sessions.models import SessionEvent

DENIED_RESULT = "The user denied this tool call."
RUNTIME_TOOL_USES = ("agent.tool_use", "agent.mcp_tool_use")  # calls answered by an agent.*_tool_result


@dataclass(kw_only=True)
class ToolDispatch:
    """The tools of one held session's turns."""

    session: RunningSession
    config: RuntimeSettings
    turn: TurnLog
    checkpoints: Checkpoints
    sandbox: SandboxUse
    auth: Callable[[], dict[str, str]]
    # The multi-agent tools of this thread (spawn, message, wait, advisor): the runtime answers them itself.
    own: ThreadTools | None = None
    _catalog: ToolCatalog | None = None

    def new_turn(self) -> None:
        """Tools are listed again in each turn."""
        self._catalog = None

    def catalog(self) -> ToolCatalog:
        """The turn's tools, listed once per turn; a server that fails to list is reported."""
        if self._catalog is None:
            timeout = self.config.mcp_timeout_seconds

            def list_tools(server_name: str, url: str) -> list[mcp_client.McpTool]:
                route = self._mcp_route(server_name, url)
                return self.checkpoints.wait_for(lambda: mcp_client.list_tools(route, timeout=timeout))

            builtin = builtin_tools_for(
                own_sandbox=self.sandbox.backend is not None, client_runs=self.session.client_runs_builtin
            )
            self._catalog = build_catalog(self.session.agent, list_tools, builtin=builtin)
            if self.own is not None:
                self._catalog.add_runtime_tools(self.own.definitions())
            self.sandbox.report_missing()
            for server_name, failure in self._catalog.failures:
                self.turn.error(failure.kind, failure.message, retry="exhausted", mcp_server_name=server_name)
        return self._catalog

    # -- the model's calls, as events ------------------------------------------------------------
    def record_call(self, block: dict[str, Any]) -> None:
        """MCP and built-in tools are the runtime's (or the client's, see `client_runs_builtin`); a call of
        a disabled built-in tool is denied at once; any other name is a custom tool for the client."""
        catalog = self.catalog()
        call = {"name": block["name"], "input": block.get("input") or {}}
        entry: McpEntry | BuiltinEntry | None = (
            catalog.mcp.get(block["name"]) or catalog.builtin.get(block["name"]) or catalog.runtime.get(block["name"])
        )
        if block["name"] in catalog.disabled_builtin:
            denied = self.turn.emit("agent.tool_use", {**call, "evaluated_permission": "deny", "evaluation": None})
            message = f"The {block['name']} tool is disabled for this agent."
            self.turn.tool_result(denied, [{"type": "text", "text": message}], is_error=True)
            return
        if entry is None:
            self.turn.emit("agent.custom_tool_use", call)
            return
        permission = {"evaluated_permission": entry.evaluated_permission, "evaluation": entry.evaluation()}
        if isinstance(entry, BuiltinEntry):
            self.turn.emit("agent.tool_use", {**call, **permission})
        else:
            self.turn.emit("agent.mcp_tool_use", {**call, "mcp_server_name": entry.tool.server_name, **permission})

    def abandon_open(self, events: list[SessionEvent]) -> None:
        """The built-in and MCP calls still open (new input or an interrupt leaves them) get the result the
        model is shown for them, so every call in the log has exactly one; an environment worker's late
        `user.tool_result` for one is refused."""
        answered = answered_calls(events)
        for call in events:
            if call.type in RUNTIME_TOOL_USES and call.id not in answered:
                self.turn.tool_result(call, [{"type": "text", "text": INTERRUPTED_RESULT}], is_error=True)

    # -- answering them --------------------------------------------------------------------------
    def answer(self, denied: list[tuple[SessionEvent, SessionEvent]], runnable: list[SessionEvent]) -> None:
        for call, confirmation in denied:
            message = confirmation.body.get("deny_message") or DENIED_RESULT
            self.turn.tool_result(call, [{"type": "text", "text": message}], is_error=True)
        for call in runnable:
            self.checkpoints.check()
            watch = ToolWatch()
            with self.turn.observer.tool(call.body["name"], watch):
                outcome = self._run(call)
                watch.is_error = outcome.is_error
            self.turn.tool_result(call, outcome.content, is_error=outcome.is_error)

    def _run(self, call: SessionEvent) -> ToolOutcome | mcp_client.McpToolOutcome:
        if call.type != "agent.tool_use":
            return self._call_mcp(call)
        if self.own is not None and self.runs_itself(call):
            return self.own.run(call)
        return self.sandbox.run(call)

    def runs_itself(self, call: SessionEvent) -> bool:
        """A call of this thread's multi-agent tools (never sent to an environment worker)."""
        return self.own is not None and call.type == "agent.tool_use" and call.body["name"] in self.own.handlers

    def _call_mcp(self, call: SessionEvent) -> mcp_client.McpToolOutcome:
        servers = {server["name"]: server["url"] for server in self.session.agent.get("mcp_servers") or []}
        server_name = call.body["mcp_server_name"]
        try:
            if server_name not in servers:
                raise mcp_client.McpUnavailable(f"The agent has no MCP server named {server_name!r}.")
            route = self._mcp_route(server_name, servers[server_name])
            self.checkpoints.lease.check()
            timeout = self.config.mcp_timeout_seconds
            arguments = call.body["input"]
            return self.checkpoints.wait_for(
                lambda: mcp_client.call_tool(route, name=call.body["name"], arguments=arguments, timeout=timeout)
            )
        except mcp_client.McpUnavailable as error:
            return mcp_client.McpToolOutcome(content=[{"type": "text", "text": str(error)}], is_error=True)

    def _mcp_route(self, server_name: str, url: str) -> mcp_client.McpRoute:
        """Direct (with the session's vault token) or through the gateway (with the session's token)."""
        if settings.REGISTRY_MCP_VIA_GATEWAY:
            return mcp_client.McpRoute.of(server_name=server_name, url=url, bearer=None, gateway_auth=self.auth())
        session = self.session
        bearer = bearer_for(workspace_id=session.workspace_id, vault_ids=session.vault_ids, server_url=url)
        return mcp_client.McpRoute.of(server_name=server_name, url=url, bearer=bearer, gateway_auth={})
