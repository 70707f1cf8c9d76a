"""Workspace snapshots off the turn's critical path, end to end: `runsessions` workers with real sandboxes,
driven through the reference client. The idle status does not wait for the snapshot; the worker keeps the
session's lease until it landed; a worker killed while a snapshot is on its way loses only that snapshot,
never what an earlier one had."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

import pytest
from django.core.files.storage import storages

from fakes import model as replies
from fakes.waiting import wait_until
from registry.sandbox import snapshots
from registry.sandbox.disks import release_root
from registry.sessions.models import Session, SessionEvent
from tests.support.runtime.sessions import of_type

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

TOOLSET = {"type": "agent_toolset_20260401", "configs": []}
BIG_WORKSPACE = "head -c 80M /dev/urandom > big.bin && echo written"  # about a second to archive here


def processed_at(session_id: str, kind: str) -> datetime:
    """When the session's last event of this kind was written (the worker's clock, to the microsecond)."""
    event = SessionEvent.objects.filter(session_id=session_id, type=kind).order_by("-seq").first()
    assert event is not None and event.processed_at is not None
    return event.processed_at


def lease_released(session_id: str) -> bool:
    return Session.objects.filter(pk=session_id, lease_owner__isnull=True).exists()


def manifest_written_at(session_id: str, seq: int) -> float | None:
    """When the session's snapshot number `seq` landed in storage (its manifest's mtime), or None."""
    path = Path(storages["default"].path(f"{snapshots.folder(session_id)}/manifest-{seq:08d}.json"))
    return path.stat().st_mtime if path.exists() else None


@pytest.fixture
def sandbox_roots() -> Iterator[Callable[[], str]]:
    """Sandbox roots of the workers a test starts (one each, under /tmp, which session uids can traverse)."""
    made: list[str] = []

    def root() -> str:
        made.append(f"/tmp/sandboxes-snapshots-{os.urandom(4).hex()}")
        return made[-1]

    yield root
    for path in made:
        release_root(Path(path))
        shutil.rmtree(path, ignore_errors=True)


def test_idle_does_not_wait_for_the_snapshot_and_the_lease_does(model, open_session):
    model.add(replies.tool_call("bash", {"command": BIG_WORKSPACE}), replies.text("written"))
    chat = open_session(tools=[TOOLSET])
    chat.say("write a lot")
    chat.wait_idle()
    held_after_idle = not lease_released(chat.session_id)
    idle = processed_at(chat.session_id, "session.status_idle")
    last_message = processed_at(chat.session_id, "agent.message")
    wait_until(lambda: lease_released(chat.session_id), timeout=60, what="the lease to be released")
    landed = manifest_written_at(chat.session_id, 1)

    assert (idle - last_message).total_seconds() < 0.1
    assert landed is not None and landed > idle.timestamp()  # the snapshot landed after the idle status
    assert held_after_idle  # and the lease was held until it did


def test_files_outlive_a_killed_worker_through_the_snapshot(model, open_session, workers, start_worker, sandbox_roots):
    model.add(
        replies.tool_call("write", {"file_path": "kept/result.txt", "content": "survives"}),
        replies.text("written"),
        replies.tool_call("read", {"file_path": "kept/result.txt"}),
        replies.text("read back"),
    )
    chat = open_session(tools=[TOOLSET])
    workers.pause()
    first = start_worker(REGISTRY_SANDBOX_ROOT=sandbox_roots())
    chat.say("write it")
    chat.wait_idle()
    wait_until(lambda: lease_released(chat.session_id), timeout=30, what="the snapshot to land")
    first.kill()  # between turns: its local sandbox root is of no use to anyone else
    chat.processes.append(start_worker(REGISTRY_SANDBOX_ROOT=sandbox_roots()))
    chat.say("read it")
    events = chat.wait_idle(2)
    [*_, last] = of_type(events, "agent.tool_result")
    assert (last["content"][0]["text"], last["is_error"]) == ("1\tsurvives", False)


def test_a_worker_killed_while_a_snapshot_is_on_its_way_keeps_the_earlier_one(
    model, open_session, workers, start_worker, sandbox_roots
):
    model.add(
        replies.tool_call("bash", {"command": "echo first > kept.txt"}),
        replies.text("one"),
        replies.tool_call("bash", {"command": f"echo second > kept.txt && {BIG_WORKSPACE}"}),
        replies.text("two"),
        replies.tool_call("bash", {"command": "cat kept.txt; ls"}),
        replies.text("three"),
    )
    chat = open_session(tools=[TOOLSET])
    workers.pause()
    first = start_worker(REGISTRY_SANDBOX_ROOT=sandbox_roots())
    chat.say("one")
    chat.wait_idle()
    wait_until(lambda: lease_released(chat.session_id), timeout=30, what="the first snapshot to land")
    chat.say("two")
    chat.wait_idle(2)
    first.kill()  # while the second turn's snapshot is on its way
    assert manifest_written_at(chat.session_id, 2) is None, "the snapshot landed before the kill: nothing tested"

    chat.processes.append(start_worker(REGISTRY_SANDBOX_ROOT=sandbox_roots()))
    chat.say("three")
    events = chat.wait_idle(3, timeout=60)
    [*_, last] = of_type(events, "agent.tool_result")
    assert last["content"][0]["text"] == "first\nkept.txt\nexit code: 0"  # the first turn's files, whole

    wait_until(lambda: lease_released(chat.session_id), timeout=60, what="the third snapshot to land")
    chain = snapshots.latest(chat.session_id)
    assert chain is not None and chain.seq == 2  # the killed worker's snapshot never became one
    stored = set(os.listdir(storages["default"].path(snapshots.folder(chat.session_id))))
    assert stored == {f"manifest-{chain.seq:08d}.json", *chain.archives}  # what it left half-written is gone


def test_a_session_deleted_while_its_snapshot_lands_leaves_nothing_stored(model, open_session, sdk):
    model.add(replies.tool_call("bash", {"command": BIG_WORKSPACE}), replies.text("written"))
    chat = open_session(tools=[TOOLSET])
    chat.say("write a lot")
    chat.wait_idle()
    sdk.beta.sessions.delete(chat.session_id)
    folder = Path(storages["default"].path(snapshots.folder(chat.session_id)))
    wait_until(lambda: not folder.exists() or not os.listdir(folder), timeout=60, what="the snapshot to be removed")
    time.sleep(1)
    assert not folder.exists() or not os.listdir(folder)


def test_a_stopping_worker_waits_for_the_snapshot_on_its_way(model, open_session, workers, start_worker, sandbox_roots):
    model.add(replies.tool_call("bash", {"command": BIG_WORKSPACE}), replies.text("written"))
    chat = open_session(tools=[TOOLSET])
    workers.pause()
    worker = start_worker(REGISTRY_SANDBOX_ROOT=sandbox_roots())
    chat.say("write a lot")
    chat.wait_idle()
    assert manifest_written_at(chat.session_id, 1) is None, "the snapshot landed before SIGTERM: nothing tested"
    assert worker.stop() == 0  # SIGTERM: the drain waits for the snapshot
    assert manifest_written_at(chat.session_id, 1) is not None and lease_released(chat.session_id)


def test_a_stopping_worker_lets_a_snapshot_go_at_its_drain_deadline(
    model, open_session, workers, start_worker, sandbox_roots
):
    model.add(replies.tool_call("bash", {"command": BIG_WORKSPACE}), replies.text("written"))
    chat = open_session(tools=[TOOLSET])
    workers.pause()
    worker = start_worker(REGISTRY_SANDBOX_ROOT=sandbox_roots(), REGISTRY_RUNTIME_DRAIN_SECONDS="0.2")
    chat.say("write a lot")
    chat.wait_idle()
    assert manifest_written_at(chat.session_id, 1) is None, "the snapshot landed before SIGTERM: nothing tested"
    stopping = time.monotonic()
    assert worker.stop() == 0
    assert time.monotonic() - stopping < 5 and lease_released(chat.session_id)  # handed over at once
    time.sleep(1)
    assert snapshots.latest(chat.session_id) is None  # the abandoned snapshot never became the latest
