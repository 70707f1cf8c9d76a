"""Multi-agent sessions through the reference client against a live registry and runtime: an orchestrator
spawns threads of predefined and inline agents, which run concurrently in the session's sandbox, reply,
and are listed, read and streamed as threads."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import anthropic
import pytest

from fakes.plan_model import Call, PlanModel, plan
from fakes.waiting import wait_until
from registry.sessions.models import Session
from tests.support.processes import Process
from tests.support.runtime.sessions import (
    MODEL,
    Conversation,
    WorkerPool,
    of_type,
    price_per_million,
    stop_reasons,
    text_of,
)
from tests.threads.conftest import MAX_THREADS

SLOW = 1.5  # each child's model call takes this long


def replies_of(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The parsed result of the session's `wait_for_replies` call."""
    [final] = [event for event in of_type(events, "agent.message") if text_of(event).startswith("done")]
    return json.loads(text_of(final).splitlines()[-1])


def spawn(agent: str, message: str) -> Call:
    return ("spawn_agent", {"agent": agent, "message": message})


WAIT: Call = ("wait_for_replies", {})


def children(chat: Conversation) -> list[Any]:
    return list(chat.sdk.beta.sessions.threads.list(chat.session_id))[1:]


def thread_events(chat: Conversation, thread_id: str) -> list[Any]:
    return list(chat.sdk.beta.sessions.threads.events.list(thread_id, session_id=chat.session_id))


def running_children(chat: Conversation, count: int) -> list[Any]:
    """Wait until `count` child threads are running; returns them."""
    found: list[Any] = []

    def running() -> bool:
        found[:] = [thread for thread in children(chat) if thread.status == "running"]
        return len(found) == count

    wait_until(running, timeout=30, what=f"{count} running threads")
    return found


def stalled_team(team: Callable[..., Conversation], count: int = 3) -> Conversation:
    """A session whose orchestrator waits on `count` children, each in a model call that takes a minute."""
    chat = team()
    chat.say(plan(*[spawn("researcher", f"slow:60:child {index}") for index in range(count)], WAIT))
    running_children(chat, count)
    return chat


def test_three_threads_run_concurrently_and_their_replies_reach_the_orchestrator(
    team: Callable[..., Conversation], plan_model: PlanModel
) -> None:
    chat = team()
    inline = {"name": "helper", "system": "Help."}
    spawns: list[Call] = [  # in one answer of the model
        ("spawn_agent", {"agent": "researcher", "message": f"slow:{SLOW}:alpha"}),
        ("spawn_agent", {"agent": "writer", "message": f"slow:{SLOW}:beta"}),
        ("spawn_agent", {"inline_agent": inline, "message": f"slow:{SLOW}:gamma"}),
    ]
    chat.say(plan(spawns, ("wait_for_replies", {})))
    events = chat.wait_idle(timeout=60)
    assert stop_reasons(events) == ["end_turn"]
    replies = replies_of(events)
    assert [(reply["agent_name"], reply["reply"], reply["status"]) for reply in replies] == [
        ("researcher", "echo: alpha", "idle"),
        ("writer", "echo: beta", "idle"),
        ("helper", "echo: gamma", "idle"),
    ]
    # Concurrent: every child's (slow) model call arrived before the first of them was answered.
    arrivals = [at for text in ("alpha", "beta", "gamma") for at in plan_model.arrived(f"slow:{SLOW}:{text}")]
    assert len(arrivals) == 3 and max(arrivals) - min(arrivals) < SLOW

    created = of_type(events, "session.thread_created")
    assert [event["agent_name"] for event in created] == ["researcher", "writer", "helper"]
    threads = list(chat.sdk.beta.sessions.threads.list(chat.session_id))
    primary, *children = threads
    assert primary.parent_thread_id is None and len(children) == 3
    assert {child.id for child in children} == {event["session_thread_id"] for event in created}
    assert all(child.parent_thread_id == primary.id and child.status == "idle" for child in children)
    assert [child.agent.type for child in children] == ["agent", "agent", "inline"]


def test_each_thread_has_its_own_log_and_usage_adds_up_to_the_session(
    team: Callable[..., Conversation], plan_model: PlanModel
) -> None:
    chat = team()
    chat.say(plan(("spawn_agent", {"agent": "researcher", "message": "hello"}), ("wait_for_replies", {})))
    chat.wait_idle(timeout=60)
    [child] = list(chat.sdk.beta.sessions.threads.list(chat.session_id))[1:]
    child_events = [event.type for event in thread_events(chat, child.id)]
    assert child_events[0] == "agent.thread_message_received"
    assert "agent.message" in child_events and child_events[-1] == "agent.thread_message_sent"
    assert "session.thread_status_idle" in child_events
    session = chat.sdk.beta.sessions.retrieve(chat.session_id)
    retrieved = chat.sdk.beta.sessions.threads.retrieve(child.id, session_id=chat.session_id)
    assert retrieved.usage is not None and retrieved.usage.input_tokens
    # The fake model reports the same usage for every request: the child made one, the orchestrator three.
    per_request = retrieved.usage.input_tokens
    assert session.usage.input_tokens == 4 * per_request


def test_children_share_the_sessions_sandbox(team: Callable[..., Conversation]) -> None:
    chat = team()
    child_plan = plan(("bash", {"command": "echo written-by-the-researcher > shared.txt"}))
    chat.say(plan(spawn("researcher", child_plan), WAIT, ("bash", {"command": "cat shared.txt"})))
    events = chat.wait_idle(timeout=60)
    assert "written-by-the-researcher" in text_of(of_type(events, "agent.message")[-1])
    [child] = children(chat)
    listed = thread_events(chat, child.id)
    assert [event.type for event in listed if event.type.startswith("agent.tool")] == [
        "agent.tool_use",
        "agent.tool_result",
    ]


def test_a_message_to_an_idle_child_starts_its_next_turn(team: Callable[..., Conversation]) -> None:
    chat = team()
    chat.say(plan(spawn("writer", "first"), WAIT))
    chat.wait_idle(timeout=60)
    [child] = children(chat)
    chat.say(plan(("send_message", {"thread_id": child.id, "message": "second"}), ("wait_for_replies", {})))
    events = chat.wait_idle(2, timeout=60)
    assert [reply["reply"] for reply in replies_of(events[-12:])] == ["echo: second"]
    listed = thread_events(chat, child.id)
    received = [event for event in listed if event.type == "agent.thread_message_received"]
    assert [event.content[0].text for event in received] == ["first", "second"]  # type: ignore[union-attr]


def test_past_the_thread_limit_the_spawn_tool_answers_an_error(team: Callable[..., Conversation]) -> None:
    chat = team()
    chat.say(plan(*[spawn("writer", f"n{index}") for index in range(MAX_THREADS + 1)], WAIT))
    events = chat.wait_idle(timeout=90)
    results = of_type(events, "agent.tool_result")
    assert [result.get("is_error", False) for result in results[:-1]] == [False] * MAX_THREADS + [True]
    assert f"already has {MAX_THREADS} threads" in results[MAX_THREADS]["content"][0]["text"]
    assert len(children(chat)) == MAX_THREADS


def test_unknown_agents_and_inline_agents_with_tools_the_spawner_lacks_are_refused(
    team: Callable[..., Conversation],
) -> None:
    chat = team(tools=[])
    inline = {"name": "rogue", "system": "x", "tools": ["bash"]}
    chat.say(plan(spawn("nobody", "hi"), ("spawn_agent", {"inline_agent": inline, "message": "hi"})))
    events = chat.wait_idle(timeout=60)
    first, second = (result["content"][0]["text"] for result in of_type(events, "agent.tool_result"))
    assert "No predefined agent is named 'nobody'" in first and "'researcher'" in first
    assert "only built-in tools you have" in second and children(chat) == []


def test_a_self_roster_nests_until_the_depth_limit(team: Callable[..., Conversation]) -> None:
    chat = team(subagents={"type": "enabled", "predefined_agents": [{"type": "self"}]})
    message = "bottom"
    for _ in range(4):
        message = plan(spawn("boss", message), WAIT)
    chat.say(message)
    events = chat.wait_idle(timeout=90)
    assert "may nest 3 deep" in text_of(of_type(events, "agent.message")[-1])
    depths = sorted(thread.parent_thread_id is not None for thread in children(chat))
    assert len(depths) == 3


def test_an_interrupt_stops_every_thread_at_once(team: Callable[..., Conversation]) -> None:
    chat = stalled_team(team)
    interrupted_at = time.monotonic()
    chat.send({"type": "user.interrupt"})
    chat.wait_idle(timeout=10)
    stopped = [thread for thread in children(chat) if thread.status == "idle"]
    assert len(stopped) == 3 and time.monotonic() - interrupted_at < 5
    for thread in stopped:
        listed = thread_events(chat, thread.id)
        assert "agent.message" not in [event.type for event in listed]  # halted before the model answered


def test_an_interrupt_naming_a_child_stops_that_thread_only(team: Callable[..., Conversation]) -> None:
    chat = stalled_team(team)
    first, *others = running_children(chat, 3)
    with pytest.raises(anthropic.BadRequestError, match="no thread with this id"):
        chat.send({"type": "user.interrupt", "session_thread_id": "sthr_" + "x" * 24})
    chat.send({"type": "user.interrupt", "session_thread_id": first.id})
    wait_until(
        lambda: chat.sdk.beta.sessions.threads.retrieve(first.id, session_id=chat.session_id).status == "idle",
        timeout=10,
        what="the named thread to stop",
    )
    assert [thread.status for thread in children(chat) if thread.id != first.id] == ["running", "running"]
    assert chat.session()["status"] == "running" and len(others) == 2
    chat.send({"type": "user.interrupt"})  # and then the rest
    chat.wait_idle(timeout=10)
    assert {thread.status for thread in children(chat)} == {"idle"}


def test_an_archived_child_stops_and_its_log_takes_nothing_more(team: Callable[..., Conversation]) -> None:
    chat = stalled_team(team)
    first, *_ = running_children(chat, 3)
    chat.sdk.beta.sessions.threads.archive(first.id, session_id=chat.session_id)
    chat.send({"type": "user.interrupt"})  # the others are halted and reply; the archived one writes nothing
    chat.wait_idle(timeout=15)
    listed = [event.type for event in thread_events(chat, first.id)]
    assert listed[-1] == "session.thread_status_terminated" and "agent.thread_message_sent" not in listed
    statuses = {thread.id: thread.status for thread in children(chat)}
    assert statuses.pop(first.id) == "terminated" and set(statuses.values()) == {"idle"}


def test_archiving_the_session_terminates_every_thread(team: Callable[..., Conversation]) -> None:
    chat = stalled_team(team)
    chat.sdk.beta.sessions.archive(chat.session_id)
    wait_until(
        lambda: all(thread.status == "terminated" for thread in children(chat)), timeout=10, what="terminated threads"
    )
    # The worker lets the session go without writing for its threads.
    wait_until(
        lambda: Session.objects.filter(pk=chat.session_id, lease_owner__isnull=True).exists(),
        what="the worker to release the archived session",
    )
    for thread in children(chat):
        listed = [event.type for event in thread_events(chat, thread.id)]
        assert "agent.message" not in listed and listed[-1] == "session.thread_status_terminated"


def test_a_budget_reached_in_a_child_ends_the_whole_turn(team: Callable[..., Conversation]) -> None:
    price_per_million(MODEL, 1000)
    chat = team(budget={"type": "limit", "max_list_cost": {"amount": "3", "currency": "USD"}})  # three cents
    child_plan = plan(("bash", {"command": "true"}), ("bash", {"command": "true"}))
    chat.say(plan(spawn("researcher", child_plan), WAIT))
    events = chat.wait_idle(timeout=60)
    assert stop_reasons(events) == ["budget_reached"]
    [child] = children(chat)
    listed = thread_events(chat, child.id)
    [idle] = [event for event in listed if event.type == "session.thread_status_idle"]
    assert idle.stop_reason.type == "budget_reached"  # type: ignore[union-attr]


def test_the_advisor_is_consulted_through_the_model_path_and_billed(
    team: Callable[..., Conversation], plan_model: PlanModel
) -> None:
    chat = team(advisor={"type": "enabled", "model": "claude-advisor-model"})
    chat.say(plan(("advisor", {"question": "what should I do?"})))
    events = chat.wait_idle(timeout=60)
    [advice] = of_type(events, "agent.tool_result")
    assert advice.get("is_error") is not True and "what should I do?" in advice["content"][0]["text"]
    [asked] = [body for body in plan_model.requests if body["model"] == "claude-advisor-model"]
    assert "advisor" in asked["system"] and asked["messages"][-1]["role"] == "user"
    usage = chat.sdk.beta.sessions.retrieve(chat.session_id).usage
    assert usage.input_tokens == 3 * 11  # the orchestrator's two requests and the advisor's


def test_a_worker_killed_mid_turn_leaves_the_turn_and_its_threads_to_another(
    team: Callable[..., Conversation], workers: WorkerPool, start_worker: Callable[..., Process], plan_model: PlanModel
) -> None:
    chat = team()
    workers.pause()
    victim = start_worker()
    chat.processes.append(victim)
    chat.say(plan(*[spawn("researcher", f"slow:2:child {index}") for index in range(3)], WAIT))
    running_children(chat, 3)
    wait_until(lambda: len(plan_model.arrived("slow:2:child 2")) == 1, what="the last child's model call")
    victim.kill()
    workers.resume()
    events = chat.wait_idle(timeout=60)

    assert sorted(reply["reply"] for reply in replies_of(events)) == ["echo: child 0", "echo: child 1", "echo: child 2"]
    assert len(of_type(events, "session.thread_created")) == 3  # the spawns were not made again
    for thread in children(chat):
        listed = [event.type for event in thread_events(chat, thread.id)]
        # Each child answered once and replied once: the call cut off by the kill was made again, nothing else.
        assert listed.count("agent.message") == 1 and listed.count("agent.thread_message_sent") == 1
    for index in range(3):
        assert len(plan_model.arrived(f"slow:2:child {index}")) == 2
