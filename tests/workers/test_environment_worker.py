"""Issue 26: the reference client's `EnvironmentWorker` (anthropic 2.10.0, unmodified, as the deployment runs
it) serving self-hosted sessions of a live registry whose runtime has no sandbox: the built-in tools run in the
worker's working directory and are answered with `user.tool_result`; confirmations, skills, memory, several
workers, a killed worker, archive, interrupt, a revoked key, and a child thread's calls (issue 27)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, cast

import pytest

from fakes.plan_model import DONE, PlanModel, plan
from fakes.waiting import wait_until
from registry.workspaces.models import EnvironmentKey
from registry.workspaces.scoped_credentials import environment_key_revoke
from tests.support.environment_workers import TOOLSET, SelfHosted, ask, items_of, wait_finished, wait_item_state
from tests.support.runtime.sessions import MODEL, of_type, stop_reasons, text_of

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]

WORKER_TOOLS = {"bash", "read", "write", "edit", "glob", "grep"}
BASH_ASKS_FIRST = {
    "type": "agent_toolset_20260401",
    "configs": [{"name": "bash", "permission_policy": {"type": "always_ask"}}],
}
SKILL_MANIFEST = b"---\nname: release-notes\ndescription: Write release notes.\n---\nGroup by type.\n"


def answered_once(events: list[dict]) -> list[dict]:
    """The results of the session's built-in calls, after asserting each call has exactly one, from the worker."""
    calls = [use["id"] for use in of_type(events, "agent.tool_use")]
    results = of_type(events, "user.tool_result")
    assert sorted(result["tool_use_id"] for result in results) == sorted(calls)
    assert of_type(events, "agent.tool_result") == []
    return results


def last_answer(events: list[dict]) -> str:
    return text_of(of_type(events, "agent.message")[-1])


def test_the_worker_runs_each_builtin_tool_and_answers_it(self_hosted: SelfHosted, plan_model: PlanModel):
    self_hosted.start_worker("solo")
    chat = self_hosted.open()
    ask(
        chat,
        ("write", {"file_path": "notes/plan.md", "content": "alpha\nbeta\n"}),
        ("bash", {"command": "cd notes && wc -l < plan.md && export MARK=kept"}),
        ("bash", {"command": "pwd; echo $MARK"}),
        ("edit", {"file_path": "notes/plan.md", "old_string": "beta", "new_string": "gamma"}),
        ("read", {"file_path": "notes/plan.md"}),
        ("glob", {"pattern": "**/*.md"}),
        ("grep", {"pattern": "gamma"}),
    )
    events = wait_finished(chat)
    assert len(answered_once(events)) == 7
    workdir = self_hosted.workdir("solo")
    assert (workdir / "notes" / "plan.md").read_text() == "alpha\ngamma\n"
    answer = last_answer(events)
    assert answer.startswith(DONE) and f"{workdir}/notes\nkept" in answer and "gamma" in answer
    offered = {tool["name"] for tool in plan_model.requests[-1]["tools"]}
    assert offered == WORKER_TOOLS  # no web_fetch / web_search: the worker would not answer them

    # The worker lets the item go once the session has been idle for its max_idle; new input queues another.
    first = wait_item_state(chat.session_id, "stopped")
    assert first.worker_id == "solo"
    ask(chat, ("bash", {"command": "echo again"}))
    events = wait_finished(chat, turns=2)
    assert "again" in last_answer(events) and len(answered_once(events)) == 8
    assert len(items_of(chat.session_id)) == 2


def test_an_always_ask_call_waits_for_the_users_verdict(self_hosted: SelfHosted):
    self_hosted.start_worker("careful")
    chat = self_hosted.open(tools=[BASH_ASKS_FIRST])
    ask(chat, ("bash", {"command": "touch allowed"}), ("bash", {"command": "touch denied"}))
    workdir = self_hosted.workdir("careful")

    events = chat.wait_for(
        lambda events: len(of_type(events, "agent.tool_use")) == 1 and "requires_action" in stop_reasons(events)
    )
    [call] = of_type(events, "agent.tool_use")
    assert call["evaluated_permission"] == "ask"
    wait_item_state(chat.session_id, "active")
    time.sleep(1.5)  # the worker holds the call: nothing ran, nothing was answered
    assert not (workdir / "allowed").exists() and of_type(chat.events(), "user.tool_result") == []
    chat.send({"type": "user.tool_confirmation", "tool_use_id": call["id"], "result": "allow"})

    events = chat.wait_for(
        lambda events: (
            len(of_type(events, "agent.tool_use")) == 2
            and stop_reasons(events)[-1:] == ["requires_action"]
            and len(of_type(events, "user.tool_result")) == 1
        )
    )
    assert (workdir / "allowed").exists()
    second = of_type(events, "agent.tool_use")[1]
    chat.send(
        {"type": "user.tool_confirmation", "tool_use_id": second["id"], "result": "deny", "deny_message": "not that"}
    )
    events = wait_finished(chat)
    [denied] = of_type(events, "agent.tool_result")  # the runtime answers a denied call; the worker runs nothing
    assert denied["tool_use_id"] == second["id"] and denied["is_error"]
    assert not (workdir / "denied").exists()
    assert [result["tool_use_id"] for result in of_type(events, "user.tool_result")] == [call["id"]]


def test_skills_are_in_the_workdir_and_memory_is_synced_back(self_hosted: SelfHosted, plan_model: PlanModel):
    sdk = self_hosted.sdk
    skill = sdk.beta.skills.create(files=[("release-notes/SKILL.md", SKILL_MANIFEST)])
    store = sdk.beta.memory_stores.create(name="notes")
    sdk.beta.memory_stores.memories.create(store.id, path="/facts.md", content="the sky is blue")
    self_hosted.start_worker("remembering")
    resources = [{"type": "memory_store", "memory_store_id": store.id, "access": "read_write"}]
    chat = self_hosted.open(skills=[{"type": "custom", "skill_id": skill.id}], resources=resources)
    ask(
        chat,
        ("read", {"file_path": "skills/release-notes/SKILL.md"}),
        ("bash", {"command": "cat /mnt/memory/notes/facts.md"}),
        ("write", {"file_path": "/mnt/memory/notes/learned.md", "content": "water is wet"}),
    )
    events = wait_finished(chat)
    answered_once(events)
    answer = last_answer(events)
    assert "Group by type." in answer and "the sky is blue" in answer
    system = "\n".join(block["text"] for block in plan_model.requests[-1]["system"])
    assert "skills/release-notes/SKILL.md" in system and "/mnt/memory/notes" in system

    def learned() -> bool:
        memories = sdk.beta.memory_stores.memories.list(store.id)
        return any(memory.path == "/learned.md" for memory in memories)

    wait_until(learned, timeout=30, what="the memory the agent wrote to be synced back")
    listed = sdk.beta.memory_stores.memories.list(store.id)
    [memory_id] = [cast(Any, memory).id for memory in listed if memory.path == "/learned.md"]
    assert sdk.beta.memory_stores.memories.retrieve(memory_id, memory_store_id=store.id).content == "water is wet"
    assert not Path("/mnt/memory/notes/learned.md").exists()  # the worker's mount namespace kept it


def test_two_workers_share_the_queue_and_run_each_call_once(self_hosted: SelfHosted, tmp_path: Path):
    ledger = tmp_path / "ledger"
    for name in ("left", "right"):
        self_hosted.start_worker(name)
    chats = [self_hosted.open() for _ in range(6)]
    for index, chat in enumerate(chats):
        ask(chat, ("bash", {"command": f"echo session-{index} >> {ledger}"}))
    for chat in chats:
        answered_once(wait_finished(chat))
    assert sorted(ledger.read_text().split()) == sorted(f"session-{index}" for index in range(len(chats)))
    served_by = {item.worker_id for chat in chats for item in items_of(chat.session_id)}
    assert served_by == {"left", "right"}


def test_a_killed_workers_item_is_reclaimed_and_the_session_finishes(self_hosted: SelfHosted):
    first = self_hosted.start_worker("doomed")
    chat = self_hosted.open()
    ask(chat, ("bash", {"command": "touch started && sleep 2 && echo finished"}))
    wait_until(lambda: (self_hosted.workdir("doomed") / "started").exists(), timeout=30, what="the call to start")
    first.kill()
    self_hosted.start_worker("heir")
    events = wait_finished(chat)
    [result] = answered_once(events)
    assert "finished" in result["content"][0]["text"]
    assert (self_hosted.workdir("heir") / "started").exists()
    [item] = items_of(chat.session_id)  # the same item, taken over once its lease lapsed
    assert item.worker_id == "heir"


def test_archive_mid_call_stops_the_item_and_the_worker_moves_on(self_hosted: SelfHosted):
    worker = self_hosted.start_worker("busy")
    chat = self_hosted.open()
    ask(chat, ("bash", {"command": "touch started && sleep 4"}))
    wait_until(lambda: (self_hosted.workdir("busy") / "started").exists(), timeout=30, what="the call to start")
    self_hosted.sdk.beta.sessions.archive(chat.session_id)
    assert items_of(chat.session_id)[-1].state == "stopping"  # at once; the worker reads it at its next heartbeat
    # The reference worker lets a call in flight finish (it shields it), then stops the item itself.
    wait_item_state(chat.session_id, "stopped", timeout=20)
    assert of_type(chat.events(), "user.tool_result") == []  # a terminated session takes no result
    assert worker.popen.poll() is None
    after = self_hosted.open()
    ask(after, ("bash", {"command": "echo next"}))
    assert "next" in last_answer(wait_finished(after))


def test_an_interrupt_stops_the_item_and_new_input_queues_another(self_hosted: SelfHosted):
    self_hosted.start_worker("patient")
    chat = self_hosted.open(tools=[BASH_ASKS_FIRST])
    ask(chat, ("bash", {"command": "touch never"}))
    chat.wait_for(lambda events: "requires_action" in stop_reasons(events))
    wait_item_state(chat.session_id, "active")
    chat.send({"type": "user.interrupt"})
    wait_item_state(chat.session_id, "stopped", timeout=15)
    events = chat.wait_for(lambda events: of_type(events, "agent.tool_result") != [])
    [abandoned] = of_type(events, "agent.tool_result")  # the call left open is answered for the model
    assert abandoned["is_error"] and not (self_hosted.workdir("patient") / "never").exists()

    chat.say("just talk")
    events = wait_finished(chat)  # the interrupt of an idle session wrote no idle of its own
    assert last_answer(events) == "echo: just talk"
    assert len(items_of(chat.session_id)) == 2


def test_a_revoked_key_is_refused_at_once_and_the_worker_stops(self_hosted: SelfHosted):
    worker = self_hosted.start_worker("revoked")
    [key] = EnvironmentKey.objects.filter(environment_id=self_hosted.environment_id)
    environment_key_revoke(environment_key=key)
    chat = self_hosted.open()
    wait_until(lambda: worker.popen.poll() is not None, timeout=30, what="the worker to give up")
    assert worker.popen.returncode != 0 and "401" in worker.log.read_text()
    [item] = items_of(chat.session_id)
    assert item.state == "queued" and item.worker_id is None


def test_a_child_threads_builtin_calls_are_run_by_the_worker_and_routed_back(self_hosted: SelfHosted):
    self_hosted.start_worker("team")
    helper = self_hosted.sdk.beta.agents.create(name="helper", model=MODEL, tools=[TOOLSET])
    roster = {"type": "enabled", "predefined_agents": [helper.id]}
    chat = self_hosted.open(multiagent={"type": "multiagent_20261001", "subagents": roster})
    child_plan = plan(("bash", {"command": "echo from-the-child > child.txt"}))
    ask(
        chat,
        ("spawn_agent", {"agent": "helper", "message": child_plan}),
        ("wait_for_replies", {}),
        ("read", {"file_path": "child.txt"}),
    )
    events = wait_finished(chat)
    assert "from-the-child" in last_answer(events)
    # The child's call is shown on the session's stream, naming its thread; the worker's answer went to it.
    [child] = list(self_hosted.sdk.beta.sessions.threads.list(chat.session_id))[1:]
    [shown] = [use for use in of_type(events, "agent.tool_use") if use.get("session_thread_id")]
    assert shown["session_thread_id"] == child.id and shown["name"] == "bash"
    [answer] = [result for result in of_type(events, "user.tool_result") if result["tool_use_id"] == shown["id"]]
    assert answer["session_thread_id"] == child.id
    listed = self_hosted.sdk.beta.sessions.threads.events.list(child.id, session_id=chat.session_id)
    assert [event.type for event in listed if event.type in ("agent.tool_use", "user.tool_result")] == [
        "agent.tool_use",
        "user.tool_result",
    ]
    assert (self_hosted.workdir("team") / "child.txt").read_text() == "from-the-child\n"
