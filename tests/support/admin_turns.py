"""A session with one finished turn in its log, written the way the runtime writes it, and the secrets
(canaries) its resources and vault hold, which no admin page may show; a turn that stops on a tool call
awaiting confirmation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from registry.sessions import log, services
from tests.support.tenants import Tenant

STAFF_PASSWORD = "console-pw"
QUESTION = "Which files are in /srv?"
ANSWER = "There is one file: notes.txt."
THINKING = "Listing /srv answers it."
REPOSITORY_TOKEN = "ghp_ADMIN_CANARY_TOKEN"
VAULT_TOKEN = "vault-ADMIN-CANARY-secret"


@dataclass(frozen=True)
class Turn:
    """A session whose log holds one finished turn, and what it was created from."""

    session_id: str
    agent_id: str
    environment_id: str
    vault_id: str


def emit(session_id: str, type: str, **body: Any) -> str:
    return log.emit(session_id=session_id, type=type, body=body).id


def write_finished_turn(session_id: str) -> None:
    """One turn as the runtime writes it: the question acknowledged, thinking, a tool call and its
    result, a retried error, the model request's usage, the answer, then idle."""
    [message] = services.events_append(
        session_id=session_id, events=[{"type": "user.message", "content": [{"type": "text", "text": QUESTION}]}]
    )
    log.acknowledge(session_id=session_id, event_ids=[message.id])
    log.transition(session_id=session_id, status="running")
    start = emit(session_id, "span.model_request_start")
    emit(session_id, "agent.thinking", **{log.THINKING_FIELD: {"type": "thinking", "text": THINKING}})
    call = emit(session_id, "agent.tool_use", name="bash", input={"command": "ls /srv"}, evaluated_permission="allow")
    emit(session_id, "agent.tool_result", tool_use_id=call, content=[{"type": "text", "text": "notes.txt"}])
    error = {"type": "model_overloaded_error", "message": "The model is busy.", "retry_status": {"type": "retrying"}}
    emit(session_id, "session.error", error=error)
    usage = {"input_tokens": 1200, "output_tokens": 345, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}
    emit(session_id, "span.model_request_end", model_request_start_id=start, is_error=False, model_usage=usage)
    log.add_usage(session_id=session_id, usage=usage)
    emit(session_id, "agent.message", content=[{"type": "text", "text": ANSWER}])
    log.transition(session_id=session_id, status="idle", stop_reason={"type": "end_turn"})


def create_finished_turn(tenant: Tenant) -> Turn:
    """Through the API: an agent, an environment, a vault with a secret, and a session with a repository
    token; then one finished turn in its log."""
    api = tenant.client
    agent = api.post("/v1/agents", {"name": "helper", "model": "m"}, format="json").json()
    environment = api.post("/v1/environments", {"name": "box"}, format="json").json()
    vault = api.post("/v1/vaults", {"display_name": "keys"}, format="json").json()
    auth = {"type": "static_bearer", "token": VAULT_TOKEN, "mcp_server_url": "https://mcp.example.com"}
    api.post(f"/v1/vaults/{vault['id']}/credentials", {"auth": auth}, format="json").json()
    repository = {"type": "github_repository", "url": "https://github.com/acme/tool.git"}
    session = api.post(
        "/v1/sessions",
        {
            "agent": agent["id"],
            "environment_id": environment["id"],
            "title": "Listing /srv",
            "vault_ids": [vault["id"]],
            "resources": [{**repository, "authorization_token": REPOSITORY_TOKEN}],
        },
        format="json",
    ).json()
    write_finished_turn(session["id"])
    return Turn(session["id"], agent["id"], environment["id"], vault["id"])


PENDING_INPUT = {"order_id": "B2"}


def write_pending_confirmation(session_id: str) -> str:
    """A turn that stops on an MCP call its `always_ask` policy holds, as the runtime writes it; the call's id."""
    log.transition(session_id=session_id, status="running")
    call = emit(
        session_id,
        "agent.mcp_tool_use",
        name="lookup_order",
        mcp_server_name="shop",
        input=PENDING_INPUT,
        evaluated_permission="ask",
    )
    log.transition(session_id=session_id, status="idle", stop_reason={"type": "requires_action", "event_ids": [call]})
    return call
