"""Deleting a session on its admin page cleans up as the API's delete does, end to end: a `runsessions` worker
(a subprocess with a real sandbox) ran a turn that left a background process and a snapshot; the admin's
delete, through the sessions' service, has the worker stop the sandbox's processes and remove its folder and
snapshots within seconds, not at the idle stop."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.files.storage import storages

from fakes import model as replies
from fakes.model import FakeModel
from fakes.waiting import wait_until
from registry.sandbox import snapshots
from registry.sandbox.uids import recorded_uid
from registry.sessions.models import Session, SessionEvent
from tests.support.admin_pages import SESSIONS, on
from tests.support.admin_staff import staff_client
from tests.support.processes import Process, start_runsessions
from tests.support.runtime.fixtures import child_env, fake_model, model
from tests.support.tenants import Tenant

__all__ = ["child_env", "fake_model", "model"]

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

TOOLSET = {"type": "agent_toolset_20260401", "configs": []}


@pytest.fixture
def worker(child_env: dict[str, str], tmp_path: Path) -> Iterator[Process]:
    process = start_runsessions(child_env, tmp_path / "worker.log")
    yield process
    process.stop()


def open_session(tenant: Tenant, text: str) -> str:
    """Through the API: an agent with the built-in tools, an environment, a session, its first message."""
    api = tenant.client
    agent = api.post("/v1/agents", {"name": "a", "model": "m", "tools": [TOOLSET]}, format="json").json()
    environment = api.post("/v1/environments", {"name": "e"}, format="json").json()
    body = {"agent": agent["id"], "environment_id": environment["id"]}
    session_id = str(api.post("/v1/sessions", body, format="json").json()["id"])
    message = {"type": "user.message", "content": [{"type": "text", "text": text}]}
    assert api.post(f"/v1/sessions/{session_id}/events", {"events": [message]}, format="json").status_code == 200
    return session_id


def settled(session_id: str) -> bool:
    """The turn ended (idle again) and the worker's lease is released (its snapshot landed)."""
    ended = SessionEvent.objects.filter(session_id=session_id, type="session.status_idle").exists()
    return ended and Session.objects.filter(pk=session_id, lease_owner__isnull=True).exists()


def processes_of(uid: int) -> list[str]:
    return subprocess.run(["pgrep", "-u", str(uid)], capture_output=True, text=True).stdout.split()


def test_deleting_a_session_here_stops_its_sandbox_and_removes_its_files(
    model: FakeModel, worker: Process, child_env: dict[str, str], tenant: Tenant
):
    model.add(
        replies.tool_call("bash", {"command": "echo kept > notes.txt; sleep 300 > /dev/null 2>&1 & echo started"}),
        replies.text("ok"),
    )
    session_id = open_session(tenant, "start something")
    wait_until(lambda: settled(session_id), timeout=60, what=f"the turn and its snapshot\n{worker.log_tail()}")
    home = Path(child_env["REGISTRY_SANDBOX_ROOT"]) / "sessions" / session_id
    uid = recorded_uid(home)
    snapshot = Path(storages["default"].path(snapshots.folder(session_id)))
    assert uid is not None and processes_of(uid) and os.listdir(snapshot)  # something to clean up

    admin = staff_client("alice", {tenant.workspace: "admin"})
    response = admin.post(on(SESSIONS, session_id, "delete"), {"post": "yes"})
    assert response.status_code == 302 and not Session.objects.filter(pk=session_id).exists()

    wait_until(lambda: processes_of(uid) == [], timeout=15, what="the sandbox's processes to be stopped")
    wait_until(lambda: not home.exists(), timeout=15, what="the sandbox's folder to be removed")
    wait_until(
        lambda: not snapshot.exists() or not os.listdir(snapshot), timeout=15, what="the snapshots to be removed"
    )
