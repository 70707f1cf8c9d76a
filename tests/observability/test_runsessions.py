"""`runsessions` observed from outside: its health server, the metrics a turn moves, JSON log lines
with the session's id, and a SIGTERM drain that hands a turn waiting on a silent model to another worker."""

from __future__ import annotations

import signal
import time

import pytest

from fakes import model as replies
from fakes.waiting import wait_until
from tests.support.observability import sample
from tests.support.runtime.sessions import WEATHER_TOOL, of_type, shop_agent, stop_reasons, text_of

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

TOOLSET = {"type": "agent_toolset_20260401", "configs": []}
DRAIN_SECONDS = 2
# Longer than the test waits for the hand-over: a takeover then proves the lease was released and the
# other worker notified, not that the lease ran out or a poll came round.
SLOW = ("--lease-seconds", "30", "--poll-seconds", "30")


def test_health_and_readiness_of_a_worker(watch):
    worker = watch("runsessions")
    assert worker.get("/healthz").status_code == 200
    ready = worker.get("/readyz")
    assert (ready.status_code, ready.text) == (200, "ready\n")
    metrics = worker.get("/metrics")
    assert metrics.headers["content-type"].startswith("text/plain; version=")
    assert sample(metrics.text, "registry_runtime_leases_held") == 0
    assert sample(metrics.text, "registry_runtime_queue_depth") == 0
    assert worker.get("/elsewhere").status_code == 404


def test_a_turn_moves_the_metrics_and_its_log_lines_carry_the_session(model, open_chat, shop, watch):
    model.add(
        replies.tool_call("bash", {"command": "echo hi"}),
        replies.tool_call("cancel_order", {"order_id": "A1"}),  # fails: an MCP tool error
        replies.tool_call("lookup_order", {"order_id": "A1"}),
        replies.tool_call("get_weather", {"city": "Paris"}),  # the client's: the turn waits for it
    )
    worker = watch("runsessions")
    mcp = shop_agent(shop)
    chat = open_chat(tools=[TOOLSET, *mcp["tools"], WEATHER_TOOL], mcp_servers=mcp["mcp_servers"])
    chat.processes.append(worker.process)
    chat.say("go")
    events = chat.wait_idle()
    assert stop_reasons(events) == ["requires_action"]
    assert [result["is_error"] for result in of_type(events, "agent.mcp_tool_result")] == [True, False]

    wait_until(
        lambda: worker.metric("registry_runtime_turns_finished_total", outcome="requires_action") == 1,
        what="the finished turn to be counted",
    )
    assert worker.metric("registry_runtime_turns_started_total") == 1
    assert worker.metric("registry_runtime_turn_duration_seconds_count") == 1
    for kind, calls in (("builtin", 1), ("mcp", 2), ("custom", 1)):
        assert worker.metric("registry_runtime_tool_calls_total", kind=kind) == calls
    assert worker.metric("registry_runtime_tool_errors_total", kind="mcp") == 1
    assert worker.metric("registry_runtime_tool_errors_total", kind="builtin") is None
    assert worker.metric("registry_runtime_sandbox_starts_total") == 1
    assert worker.metric("registry_runtime_leases_held") == 0

    lines = worker.log_lines()  # every line is one JSON object
    assert {"time", "level", "logger", "message"} <= set(lines[0]) and "session_id" not in worker.started
    session_lines = [line for line in lines if line.get("session_id") == chat.session_id]
    assert any(line["logger"] == "httpx" and "POST" in line["message"] for line in session_lines)  # its model calls


def test_sigterm_abandons_a_silent_model_call_and_hands_the_turn_to_another_worker(model, open_chat, watch):
    model.add(replies.text("never sent", delay=60), replies.text("finished elsewhere"))
    leaving = watch("runsessions", *SLOW, REGISTRY_RUNTIME_DRAIN_SECONDS=str(DRAIN_SECONDS))
    chat = open_chat()
    chat.processes.append(leaving.process)
    sent = chat.say("start here")
    wait_until(lambda: len(model.requests) == 1, what="the leaving worker's model call")
    staying = watch("runsessions", *SLOW)
    chat.processes.append(staying.process)

    signalled = time.monotonic()
    leaving.process.signal(signal.SIGTERM)  # its turn waits for a first byte: the watched call is abandoned
    draining = wait_until(lambda: leaving.get("/readyz").status_code == 503 and leaving.get("/readyz"), what="503")
    assert draining.text == "draining\n" and leaving.get("/healthz").status_code == 200
    assert leaving.process.popen.wait(timeout=DRAIN_SECONDS + 10) == 0
    assert time.monotonic() - signalled < DRAIN_SECONDS + 5

    events = chat.wait_idle(timeout=15)
    assert [text_of(event) for event in of_type(events, "agent.message")] == ["finished elsewhere"]
    assert [event["id"] for event in of_type(events, "user.message")] == [sent]
    assert stop_reasons(events) == ["end_turn"] and len({event["id"] for event in events}) == len(events)
    # It left at its turn's checkpoint: nothing had to be let go at the drain deadline.
    assert not any("letting it go" in line["message"] for line in leaving.log_lines())
    wait_until(
        lambda: staying.metric("registry_runtime_turns_finished_total", outcome="end_turn") == 1,
        what="the other worker to count the turn",
    )
