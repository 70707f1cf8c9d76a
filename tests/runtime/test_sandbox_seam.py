"""The runtime names only the sandbox interface: a turn runs its built-in tools in an in-memory backend
(no bubblewrap), writes their results to the log and snapshots the sandbox it used at the turn's end, in
the background: the idle status does not wait for the snapshot, the next turn and the runner's end do."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from django.db import connection
from rest_framework.test import APIClient

from fakes import model as replies
from fakes.model import FakeModel
from fakes.waiting import wait_until
from registry.runtime.config import RuntimeSettings
from registry.runtime.identity import ModelCallIdentity
from registry.runtime.lease import Lease
from registry.runtime.model import ModelClient
from registry.runtime.turns import SessionRunner
from registry.sandbox.spec import CommandResult
from registry.sessions import log
from registry.sessions.models import SessionEvent
from tests.support.fake_sandbox import FakeBackend
from tests.support.runtime.sessions import WorkerPool

TOOLSET = {"type": "agent_toolset_20260401", "configs": []}


@pytest.fixture(autouse=True)
def quiet_workers(worker_pool: WorkerPool) -> Iterator[None]:
    """The package's `runsessions` workers share the database: paused, they cannot win the claim these tests
    make in-process."""
    worker_pool.pause()
    yield
    worker_pool.resume()


@pytest.fixture
def backend(tmp_path: Path) -> FakeBackend:
    return FakeBackend(tmp_path, answer=lambda command: CommandResult(f"ran: {command}\n", 0))


def open_session(api: APIClient, text: str) -> str:
    """A session of an agent with the built-in tools, and its first message."""
    agent = api.post("/v1/agents", {"name": "a", "model": "m", "tools": [TOOLSET]}, format="json").json()
    environment = api.post("/v1/environments", {"name": "e"}, format="json").json()
    body = {"agent": agent["id"], "environment_id": environment["id"]}
    session_id = str(api.post("/v1/sessions", body, format="json").json()["id"])
    say(api, session_id, text)
    return session_id


def say(api: APIClient, session_id: str, text: str) -> None:
    message = {"type": "user.message", "content": [{"type": "text", "text": text}]}
    assert api.post(f"/v1/sessions/{session_id}/events", {"events": [message]}, format="json").status_code == 200


@contextmanager
def running(model: FakeModel, backend: FakeBackend) -> Iterator[threading.Thread]:
    """One worker's runner of the session with work, in a thread of this process (joined at the end)."""
    [claim] = log.claim(owner="seam", seconds=60, limit=1)
    config = RuntimeSettings.from_settings()
    client = ModelClient(base_url=model.url, config=config)
    runner = SessionRunner(
        lease=Lease(claim.fence, 60),
        model=client,
        identity=ModelCallIdentity(),
        config=config,
        stopping=threading.Event(),
        sandboxes=backend,
    )

    def run() -> None:
        try:
            runner.run()
        finally:
            connection.close()

    thread = threading.Thread(target=run, name="seam-runner")
    thread.start()
    try:
        yield thread
    finally:
        thread.join(timeout=60)
        client.close()


def run_session(api: APIClient, model: FakeModel, backend: FakeBackend, text: str) -> str:
    """A session, one message, one worker's turn (and its snapshot) run to the end."""
    session_id = open_session(api, text)
    with running(model, backend):
        pass
    return session_id


def event_types(session_id: str) -> list[str]:
    return list(
        SessionEvent.objects.filter(session_id=session_id, seq__isnull=False)
        .order_by("seq")
        .values_list("type", flat=True)
    )


@pytest.mark.django_db(transaction=True)
def test_a_turn_runs_its_tools_through_the_interface(api: APIClient, model: FakeModel, backend: FakeBackend) -> None:
    model.add(replies.tool_call("bash", {"command": "echo hi"}), replies.text("done"))
    session_id = run_session(api, model, backend, "say hi")
    sandbox = backend.sandboxes[session_id]
    assert sandbox.calls == ["catch_up", "warm", "run echo hi", "snapshot", "snapshot landed"]
    events = list(SessionEvent.objects.filter(session_id=session_id, seq__isnull=False).order_by("seq"))
    [result] = [event for event in events if event.type == "agent.tool_result"]
    assert result.body["content"] == [{"type": "text", "text": "ran: echo hi\nexit code: 0"}]
    assert not result.body["is_error"]
    assert [event.type for event in events][-2:] == ["agent.message", "session.status_idle"]
    assert events[-1].body == {"stop_reason": {"type": "end_turn"}}


@pytest.mark.django_db(transaction=True)
def test_idle_is_written_before_the_snapshot_lands_and_the_runner_waits_for_it(
    api: APIClient, model: FakeModel, backend: FakeBackend
) -> None:
    backend.snapshot_gate = gate = threading.Event()
    model.add(replies.tool_call("bash", {"command": "echo hi"}), replies.text("done"))
    session_id = open_session(api, "say hi")
    with running(model, backend) as runner:
        wait_until(lambda: "session.status_idle" in event_types(session_id), what="the idle status")
        sandbox = backend.sandboxes[session_id]
        time.sleep(0.2)
        assert sandbox.calls[-1] == "snapshot" and runner.is_alive()  # the lease is not given back yet
        gate.set()
    assert not runner.is_alive() and sandbox.calls[-1] == "snapshot landed"
    assert event_types(session_id)[-2:] == ["agent.message", "session.status_idle"]


@pytest.mark.django_db(transaction=True)
def test_the_next_turn_waits_for_the_snapshot_in_flight(api: APIClient, model: FakeModel, backend: FakeBackend) -> None:
    backend.snapshot_gate = gate = threading.Event()
    slow = replies.text("first done")
    slow.delay = 0.5  # the second message arrives while the first turn runs
    model.add(
        replies.tool_call("bash", {"command": "echo one"}),
        slow,
        replies.tool_call("bash", {"command": "echo two"}),
        replies.text("second done"),
    )
    session_id = open_session(api, "first")
    with running(model, backend):
        wait_until(lambda: len(model.requests) == 2, what="the first turn's last model call")
        say(api, session_id, "second")
        wait_until(lambda: "session.status_idle" in event_types(session_id), what="the first idle status")
        time.sleep(0.3)
        sandbox = backend.sandboxes[session_id]
        assert sandbox.calls == ["catch_up", "warm", "run echo one", "snapshot"] and len(model.requests) == 2
        gate.set()
    assert sandbox.calls == [
        *("catch_up", "warm", "run echo one", "snapshot", "snapshot landed"),
        *("catch_up", "warm", "run echo two", "snapshot", "snapshot landed"),
    ]
    assert event_types(session_id).count("session.status_idle") == 2
