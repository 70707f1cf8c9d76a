"""The runtime names only the sandbox interface: a turn runs its built-in tools in an in-memory backend
(no bubblewrap), writes their results to the log and snapshots the sandbox it used at the turn's end."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from fakes import model as replies
from fakes.model import FakeModel
from registry.runtime.config import RuntimeSettings
from registry.runtime.identity import ModelCallIdentity
from registry.runtime.lease import Lease
from registry.runtime.model import ModelClient
from registry.runtime.turns import SessionRunner
from registry.sandbox.spec import CommandResult
from registry.sessions import log
from registry.sessions.models import SessionEvent
from tests.support.fake_sandbox import FakeBackend

TOOLSET = {"type": "agent_toolset_20260401", "configs": []}


@pytest.fixture
def backend(tmp_path: Path) -> FakeBackend:
    return FakeBackend(tmp_path, answer=lambda command: CommandResult(f"ran: {command}\n", 0))


def run_session(api: APIClient, model: FakeModel, backend: FakeBackend, text: str) -> str:
    """A session of an agent with the built-in tools, one message, one worker's turn in this process."""
    agent = api.post("/v1/agents", {"name": "a", "model": "m", "tools": [TOOLSET]}, format="json").json()
    environment = api.post("/v1/environments", {"name": "e"}, format="json").json()
    body = {"agent": agent["id"], "environment_id": environment["id"]}
    session_id = str(api.post("/v1/sessions", body, format="json").json()["id"])
    message = {"type": "user.message", "content": [{"type": "text", "text": text}]}
    assert api.post(f"/v1/sessions/{session_id}/events", {"events": [message]}, format="json").status_code == 200
    [claim] = log.claim(owner="seam", seconds=60, limit=1)
    config = RuntimeSettings.from_settings()
    client = ModelClient(base_url=model.url, config=config)
    try:
        runner = SessionRunner(
            lease=Lease(claim.fence, 60),
            model=client,
            identity=ModelCallIdentity(),
            config=config,
            stopping=threading.Event(),
            sandboxes=backend,
        )
        runner.run()
    finally:
        client.close()
    return session_id


@pytest.mark.django_db(transaction=True)
def test_a_turn_runs_its_tools_through_the_interface(api: APIClient, model: FakeModel, backend: FakeBackend) -> None:
    model.add(replies.tool_call("bash", {"command": "echo hi"}), replies.text("done"))
    session_id = run_session(api, model, backend, "say hi")
    sandbox = backend.sandboxes[session_id]
    assert sandbox.calls == ["catch_up", "warm", "run echo hi", "snapshot"]
    events = list(SessionEvent.objects.filter(session_id=session_id, seq__isnull=False).order_by("seq"))
    [result] = [event for event in events if event.type == "agent.tool_result"]
    assert result.body["content"] == [{"type": "text", "text": "ran: echo hi\nexit code: 0"}]
    assert not result.body["is_error"]
    assert [event.type for event in events][-2:] == ["agent.message", "session.status_idle"]
    assert events[-1].body == {"stop_reason": {"type": "end_turn"}}
