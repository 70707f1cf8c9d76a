"""The README's walkthrough: an agent with the built-in toolset works in a git repository, followed
through the session's event stream to the end of its turn.

Start the product first with your provider key (the gateway reads it from the `demo` vault; the registry
sends its model calls to the gateway):

    VAULT__DEMO__VENDOR_B=sk-ant-... make run

then, with the demo workspace key `make run` printed:

    REGISTRY_API_KEY=... .venv/bin/python examples/walkthrough.py

Variables: REGISTRY_URL (default http://127.0.0.1:8000), REGISTRY_API_KEY (required), WALKTHROUGH_MODEL
(default claude-sonnet-4-5), WALKTHROUGH_REPOSITORY (default https://github.com/pallets/itsdangerous),
GITHUB_TOKEN (only for a private repository).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import anthropic
from anthropic.types.beta import (
    BetaManagedAgentsAgentToolset20260401Params,
    BetaManagedAgentsGitHubRepositoryResourceParams,
)
from anthropic.types.beta.sessions import BetaManagedAgentsUserMessageEventParams

TOOLSET: BetaManagedAgentsAgentToolset20260401Params = {"type": "agent_toolset_20260401"}
PROMPT = "List the repository's files, then tell me in one sentence what the project does."


def connect() -> anthropic.Anthropic:
    """The reference client, pointed at the registry with the workspace key in `x-api-key` (its `api_key`
    would go out as `Authorization: Bearer`, which the registry reads as an OIDC access token)."""
    url = os.environ.get("REGISTRY_URL", "http://127.0.0.1:8000")
    key = os.environ["REGISTRY_API_KEY"]
    return anthropic.Anthropic(base_url=url, api_key=None, default_headers={"x-api-key": key})


def repository() -> BetaManagedAgentsGitHubRepositoryResourceParams:
    """The session's repository: cloned by the runtime and mounted at /workspace/project."""
    resource: BetaManagedAgentsGitHubRepositoryResourceParams = {
        "type": "github_repository",
        "url": os.environ.get("WALKTHROUGH_REPOSITORY", "https://github.com/pallets/itsdangerous"),
        "mount_path": "/workspace/project",
    }
    if os.environ.get("GITHUB_TOKEN"):
        resource["authorization_token"] = os.environ["GITHUB_TOKEN"]
    return resource


def describe(event: Any) -> str:
    """One line per event of the stream."""
    if event.type == "agent.message":
        return "agent: " + "".join(block.text for block in event.content if block.type == "text")
    if event.type == "agent.tool_use":
        return f"tool call: {event.name} {event.input}"
    if event.type == "agent.tool_result":
        output = "".join(block.text for block in event.content or [] if block.type == "text")
        return f"tool result{' (error)' if event.is_error else ''}: {output[:300]}"
    if event.type == "session.error":
        return f"error: {event.error.type}: {event.error.message}"
    if event.type == "session.status_idle":
        return f"idle: {event.stop_reason.type}"
    return event.type


def main() -> int:
    client = connect()
    environment = client.beta.environments.create(name="walkthrough")
    agent = client.beta.agents.create(
        name="walkthrough",
        model=os.environ.get("WALKTHROUGH_MODEL", "claude-sonnet-4-5"),
        system="You are a careful engineer. Use your tools to look before you answer.",
        tools=[TOOLSET],
    )
    session = client.beta.sessions.create(agent=agent.id, environment_id=environment.id, resources=[repository()])
    print(f"session {session.id}")
    with client.beta.sessions.events.stream(session.id) as stream:
        message: BetaManagedAgentsUserMessageEventParams = {
            "type": "user.message",
            "content": [{"type": "text", "text": PROMPT}],
        }
        client.beta.sessions.events.send(session.id, events=[message])
        for event in stream:
            print(describe(event), flush=True)
            if event.type == "session.status_idle" and event.stop_reason.type != "requires_action":
                return 0 if event.stop_reason.type == "end_turn" else 1
    return 1


if __name__ == "__main__":
    sys.exit(main())
