"""What a turn knows of the session it runs, read once when a runner starts: the agent, its model and
context window, the environment's network policy, the budget, and who runs the built-in tools."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from registry.runtime import context
from registry.runtime.attachments import FileSources
from registry.runtime.budget import BudgetMeter
from registry.runtime.config import RuntimeSettings
from registry.sandbox.egress import NetworkPolicy
from registry.sessions import selectors, work

HARNESSES_IGNORING_INTERRUPT = ("code_harness",)


def model_id(agent: dict[str, Any]) -> str:
    """The agent's model id (`model` is stored as `{id, ...}`; a bare id is accepted too)."""
    model = agent["model"]
    return str(model["id"] if isinstance(model, dict) else model)


@dataclass
class RunningSession:
    """A held session as its turns see it (`resources` follows the session's as they change)."""

    session_id: str
    workspace_id: str
    agent_id: str
    agent: dict[str, Any]
    vault_ids: list[str]
    resources: list[dict[str, Any]]
    status: str
    environment_id: str
    environment_config: dict[str, Any]
    honors_interrupts: bool
    # With the agent SDK harness in separate mode on a self-hosted environment the client runs them.
    client_runs_builtin: bool
    network: NetworkPolicy
    budget: BudgetMeter
    model_id: str
    window: int
    files: FileSources

    @classmethod
    def load(cls, session_id: str, config: RuntimeSettings) -> RunningSession:
        session = selectors.session_to_run(session_id)
        agent: dict[str, Any] = session.agent_snapshot
        environment = session.environment.config
        mcp_hosts = tuple(urlsplit(server["url"]).hostname or "" for server in agent.get("mcp_servers") or [])
        chosen_model = model_id(agent)
        return cls(
            session_id=session_id,
            workspace_id=session.workspace_id,
            agent_id=session.agent_id,
            agent=agent,
            vault_ids=list(session.vault_ids),
            resources=list(session.resources),
            status=session.status,
            environment_id=session.environment_id,
            environment_config=environment,
            honors_interrupts=session.harness.get("type") not in HARNESSES_IGNORING_INTERRUPT,
            client_runs_builtin=work.client_runs_builtin(session.harness, environment),
            network=NetworkPolicy.from_environment(environment, mcp_hosts),
            budget=BudgetMeter.for_session(session),
            model_id=chosen_model,
            window=context.context_window(chosen_model, config.context_tokens),
            files=FileSources(session.workspace_id),
        )
