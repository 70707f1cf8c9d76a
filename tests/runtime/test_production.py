"""The runtime under production conditions: concurrency, fencing, lifecycle races, context, limits, budget."""

from __future__ import annotations

import signal
import threading
import time

import pytest

from fakes import model as replies
from tests.support.runtime.sessions import (
    MODEL,
    grading_in_flight,
    of_type,
    price_per_million,
    shop_agent,
    stop_reasons,
    text_of,
    transcript,
    wait_until,
)

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

LOOKUP = {
    "type": "custom",
    "name": "lookup",
    "description": "Look a thing up.",
    "input_schema": {"type": "object", "properties": {"thing": {"type": "string"}}},
}


def test_two_workers_run_64_sessions_concurrently(model, open_session):
    """64 sessions whose model takes 2 s each: one at a time this would take 128 s."""
    model.add(*[replies.text("done", delay=2.0) for _ in range(64)])
    chats = [open_session() for _ in range(64)]
    started = time.monotonic()
    senders = [threading.Thread(target=chat.say, args=("go",)) for chat in chats]
    for sender in senders:
        sender.start()
    for sender in senders:
        sender.join()
    for chat in chats:
        assert stop_reasons(chat.wait_idle(timeout=60)) == ["end_turn"]
    elapsed = time.monotonic() - started
    assert len(model.requests) == 64 and model.most_in_flight >= 16
    assert elapsed < 64 * 2 / 8, f"64 turns took {elapsed:.1f} s"


def test_a_stalled_worker_is_fenced_out_after_a_takeover(model, open_session, workers, start_worker):
    model.add(replies.text("stale answer", delay=4.0), replies.text("recovered"))
    chat = open_session()
    workers.pause()
    victim = start_worker()
    chat.processes.append(victim)
    chat.say("hello")
    wait_until(lambda: len(model.requests) == 1, what="the victim's model call")
    victim.signal(signal.SIGSTOP)  # past its 2 s lease: another worker takes over
    workers.resume()
    chat.wait_idle(timeout=30)
    wait_until(lambda: model.in_flight == 0, timeout=10, what="the stale answer to be sent")
    victim.signal(signal.SIGCONT)
    wait_until(lambda: f"left session {chat.session_id}" in victim.log.read_text(), what="the victim to give up")

    events = chat.events()
    assert [text_of(event) for event in of_type(events, "agent.message")] == ["recovered"]
    assert stop_reasons(events) == ["end_turn"] and len(of_type(events, "session.status_idle")) == 1
    assert len({event["id"] for event in events}) == len(events)


def test_archive_while_grading_stays_terminated(model, open_session, workers):
    chat = grading_in_flight(model, open_session, grader_delay=2.0)
    chat.sdk.beta.sessions.archive(chat.session_id)
    wait_until(lambda: model.in_flight == 0, timeout=10, what="the grader's answer")
    logs = lambda: "".join(process.log.read_text() for process in workers.processes)  # noqa: E731
    wait_until(lambda: f"left session {chat.session_id}" in logs(), what="the worker to leave the session")

    session = chat.session()
    assert session["status"] == "terminated" and session["archived_at"]
    events = chat.events(native=True)
    assert events[-1]["type"] == "session.status_terminated" and of_type(events, "span.outcome_evaluation_end") == []
    with pytest.raises(Exception) as refused:
        chat.say("more?")
    assert "session_terminated" in str(refused.value)


def test_a_long_transcript_is_compacted_and_the_turn_goes_on(model, open_session, workers, start_worker):
    first, second = "A" * 2200, "B" * 2200
    model.add(replies.text("ok one"), replies.text("Summary: the user sent a long run of As."), replies.text("ok two"))
    chat = open_session()
    workers.pause()
    chat.processes.append(start_worker(REGISTRY_MODEL_CONTEXT_TOKENS="1500"))
    chat.say(first)
    chat.wait_idle()
    chat.say(second)
    events = chat.wait_idle(2)

    assert [text_of(event) for event in of_type(events, "agent.message")] == ["ok one", "ok two"]
    assert len(of_type(events, "agent.thread_context_compacted")) == 1
    summary_request, after = model.requests[1].body, transcript(model.requests[2].body)
    assert first in summary_request["messages"][0]["content"][0]["text"] and "tools" not in summary_request
    assert "long run of As" in after[0]["content"][0]["text"]
    assert first not in str(after) and second in str(after)
    assert model.requests[2].body["max_tokens"] <= 1500 // 4


def test_a_tool_call_cut_by_max_tokens_is_never_run(model, open_session):
    model.add(replies.cut_tool_call("lookup", {"thing": "x" * 50}), replies.tool_call("lookup", {"thing": "whole"}))
    chat = open_session(tools=[LOOKUP])
    chat.say("look it up")
    events = chat.wait_idle()
    assert [use["input"] for use in of_type(events, "agent.custom_tool_use")] == [{"thing": "whole"}]
    assert model.requests[1].body["max_tokens"] == 2 * model.requests[0].body["max_tokens"]

    model.add(replies.cut_tool_call("lookup", {"thing": "y" * 50}), replies.cut_tool_call("lookup", {"thing": "z"}))
    chat = open_session(tools=[LOOKUP])
    chat.say("look it up")
    events = chat.wait_idle()
    assert of_type(events, "agent.custom_tool_use") == [] and stop_reasons(events) == ["retries_exhausted"]
    [error] = of_type(events, "session.error")
    assert error["error"]["type"] == "model_request_failed_error" and "max_tokens" in error["error"]["message"]
    assert error["error"]["retry_status"] == {"type": "terminal"}


def test_the_step_limit_ends_the_turn(model, open_session, shop, workers, start_worker):
    model.add(*[replies.tool_call("lookup_order", {"order_id": "A1"}) for _ in range(3)])
    chat = open_session(**shop_agent(shop))
    workers.pause()
    chat.processes.append(start_worker(REGISTRY_TURN_MAX_MODEL_CALLS="2"))
    chat.say("loop")
    events = chat.wait_idle()
    assert len(model.requests) == 2 and len(shop.calls) == 2
    [error] = of_type(events, "session.error")
    assert error["error"]["type"] == "tool_use_limit_reached_error"
    assert error["error"]["retry_status"] == {"type": "exhausted"}
    assert stop_reasons(events) == ["retries_exhausted"]


def test_a_budget_stops_the_session_once_reached(model, open_session, shop, sdk):
    price_per_million(MODEL, 1000)
    model.add(replies.tool_call("lookup_order", {"order_id": "A1"}), replies.text("never asked"))
    chat = open_session(**shop_agent(shop))
    agent_id = chat.session()["agent"]["id"]
    environment_id = chat.session()["environment_id"]
    budget = {"type": "limit", "max_list_cost": {"amount": "1", "currency": "USD"}}  # one cent
    session = sdk.beta.sessions.create(agent=agent_id, environment_id=environment_id, budget=budget)
    chat.session_id = session.id
    assert chat.session()["budget"] == budget
    chat.say("spend")
    events = chat.wait_idle()
    assert len(model.requests) == 1 and stop_reasons(events) == ["budget_reached"]

    unpriced = sdk.beta.agents.create(name="unpriced", model="claude-without-price")
    with pytest.raises(Exception) as refused:
        sdk.beta.sessions.create(agent=unpriced.id, environment_id=environment_id, budget=budget)
    assert "model_not_budgetable" in str(refused.value)


def test_retry_after_is_honoured(model, open_session):
    model.add(replies.failure(429, retry_after="1"), replies.text("after the wait"))
    chat = open_session()
    chat.say("hi")
    events = chat.wait_idle()
    assert [text_of(event) for event in of_type(events, "agent.message")] == ["after the wait"]
    assert of_type(events, "session.error")[0]["error"]["type"] == "model_rate_limited_error"
    assert model.requests[1].at - model.requests[0].at >= 1.0  # the test settings' backoff is 0.1 s


def test_mcp_urls_on_loopback_and_metadata_addresses_are_refused(model, open_session, shop, workers, start_worker):
    model.add(replies.text("carrying on without tools"))
    servers = [
        {"type": "url", "name": "local", "url": shop.url},
        {"type": "url", "name": "metadata", "url": "http://169.254.169.254/latest/mcp"},
    ]
    toolsets = [{"type": "mcp_toolset", "mcp_server_name": server["name"]} for server in servers]
    chat = open_session(mcp_servers=servers, tools=toolsets)
    workers.pause()
    chat.processes.append(start_worker(REGISTRY_EGRESS_ALLOW=""))  # no operator exception here
    chat.say("use your tools")
    events = chat.wait_idle()

    errors = {error["error"]["mcp_server_name"]: error["error"] for error in of_type(events, "session.error")}
    assert set(errors) == {"local", "metadata"}
    assert {error["type"] for error in errors.values()} == {"mcp_connection_failed_error"}
    assert all("not one the runtime may connect to" in error["message"] for error in errors.values())
    assert shop.calls == [] and "tools" not in model.requests[0].body
    assert [text_of(event) for event in of_type(events, "agent.message")] == ["carrying on without tools"]
