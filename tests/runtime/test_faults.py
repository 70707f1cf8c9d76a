"""Faults end to end: interrupts on both harnesses, a model that fails, a worker killed mid-turn."""

from __future__ import annotations

import time
from typing import Any

import pytest

from fakes import model as replies
from fakes.waiting import wait_until
from registry.sessions.models import Session
from tests.support.runtime.sessions import grading_in_flight, of_type, stop_reasons, text_of

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

SLOW_ANSWER = "a long answer streamed slowly, one fragment at a time"


def test_interrupt_unwinds_a_default_turn(model, open_session):
    model.add(replies.text(SLOW_ANSWER, chunks=40, chunk_delay=0.1), replies.text("fresh start"))
    chat = open_session()
    chat.say("write a lot")
    wait_until(lambda: len(model.requests) == 1, what="the model call")
    interrupt = chat.send({"type": "user.interrupt"})[0]
    events = chat.wait_idle()

    assert stop_reasons(events) == ["end_turn"]  # an unwound turn ends as a finished one (decisions.md)
    assert of_type(events, "agent.message") == []  # the unfinished message is dropped
    assert of_type(events, "user.interrupt")[0]["id"] == interrupt
    assert chat.session()["status"] == "idle"

    chat.say("try again")
    events = chat.wait_idle(2)
    assert stop_reasons(events) == ["end_turn", "end_turn"]
    assert text_of(of_type(events, "agent.message")[0]) == "fresh start"
    assert [message["role"] for message in model.requests[1].body["messages"]] == ["user"]


def test_interrupt_on_code_harness_is_answered_with_an_error(model, open_session):
    model.add(replies.text(SLOW_ANSWER, chunks=10, chunk_delay=0.1))
    chat = open_session(harness={"type": "code_harness"})
    chat.say("write a lot")
    wait_until(lambda: len(model.requests) == 1, what="the model call")
    chat.send({"type": "user.interrupt"})
    events = chat.wait_idle()

    error = of_type(events, "session.error")[0]["error"]
    assert error["type"] == "unknown_error" and error["retry_status"] == {"type": "exhausted"}
    types = [event["type"] for event in events]
    assert types.index("user.interrupt") < types.index("session.error") < types.index("agent.message")
    assert text_of(of_type(events, "agent.message")[0]) == SLOW_ANSWER  # the turn ran to completion
    assert stop_reasons(events) == ["end_turn"]


def test_interrupt_on_code_harness_with_native_beta_is_unapplied_event(model, open_session):
    model.add(replies.text(SLOW_ANSWER, chunks=10, chunk_delay=0.1))
    chat = open_session(harness={"type": "code_harness"})
    chat.say("write a lot")
    wait_until(lambda: len(model.requests) == 1, what="the model call")
    chat.send({"type": "user.interrupt"}, native=True)
    events = chat.wait_idle()

    assert of_type(events, "session.error")[0]["error"]["type"] == "unapplied_event"
    assert all("_native_beta" not in event for event in chat.events(native=True))  # the flag is never shown


def test_model_failures_are_retried_then_reported(model, open_session):
    model.add(replies.dropped(), replies.failure(429), replies.failure(503))
    chat = open_session()
    chat.say("hello?")
    events = chat.wait_idle()

    errors = [event["error"] for event in of_type(events, "session.error")]
    assert [error["type"] for error in errors] == [
        "model_request_failed_error",
        "model_rate_limited_error",
        "model_request_failed_error",
    ]
    assert [error["retry_status"]["type"] for error in errors] == ["retrying", "retrying", "exhausted"]
    assert of_type(events, "session.status_rescheduled")
    assert stop_reasons(events) == ["retries_exhausted"] and len(model.requests) == 3

    model.add(replies.text("back again"))
    chat.say("hello again")
    events = chat.wait_idle(2)
    assert stop_reasons(events) == ["retries_exhausted", "end_turn"]
    assert text_of(of_type(events, "agent.message")[0]) == "back again"


def test_a_retry_that_succeeds_returns_to_running(model, open_session):
    model.add(replies.failure(529), replies.text("made it"))
    chat = open_session()
    chat.say("hello?")
    events = chat.wait_idle()
    assert [event["type"] for event in events if event["type"].startswith("session.")] == [
        "session.status_running",
        "session.error",
        "session.status_rescheduled",
        "session.status_running",
        "session.status_idle",
    ]
    assert of_type(events, "session.error")[0]["error"]["type"] == "model_overloaded_error"
    assert stop_reasons(events) == ["end_turn"]


def test_a_refused_request_is_not_retried(model, open_session):
    model.add(replies.failure(400))
    chat = open_session()
    chat.say("hello?")
    events = chat.wait_idle()
    assert stop_reasons(events) == ["retries_exhausted"] and len(model.requests) == 1
    assert of_type(events, "session.error")[0]["error"]["retry_status"] == {
        "type": "terminal"
    }  # a refusal is not worth retrying


def test_killed_worker_loses_no_user_event(model, open_session, workers, start_worker):
    model.add(replies.text("never sent", delay=60), replies.text("recovered"))
    chat = open_session()
    workers.pause()
    victim = start_worker()
    chat.processes.append(victim)
    sent = chat.say("survive this")
    wait_until(lambda: len(model.requests) == 1, what="the victim's model call")
    victim.kill()
    workers.resume()
    events = chat.wait_idle()

    assert [
        (event["type"], text_of(event)) for event in events if event["type"] in ("user.message", "agent.message")
    ] == [
        ("user.message", "survive this"),
        ("agent.message", "recovered"),
    ]
    assert of_type(events, "user.message")[0]["id"] == sent
    assert stop_reasons(events) == ["end_turn"] and len(of_type(events, "session.status_running")) == 1
    assert model.requests[1].body["messages"] == model.requests[0].body["messages"]


def test_sigterm_leaves_the_turn_to_another_worker(model, open_session, workers, start_worker):
    model.add(replies.text(SLOW_ANSWER, chunks=40, chunk_delay=0.1), replies.text("finished elsewhere"))
    chat = open_session()
    workers.pause()
    leaving = start_worker()
    chat.processes.append(leaving)
    chat.say("start here")
    wait_until(lambda: len(model.requests) == 1, what="the leaving worker's model call")
    assert leaving.stop() == 0  # a clean exit at the next checkpoint, not a kill
    workers.resume()
    events = chat.wait_idle()
    assert [text_of(event) for event in of_type(events, "agent.message")] == ["finished elsewhere"]
    assert stop_reasons(events) == ["end_turn"] and len(model.requests) == 2


def test_archiving_mid_turn_stops_the_worker(model, open_session):
    model.add(replies.text(SLOW_ANSWER, chunks=40, chunk_delay=0.1), replies.text("next"))
    chat = open_session()
    chat.say("write a lot")
    wait_until(lambda: len(model.requests) == 1, what="the model call")
    chat.sdk.beta.sessions.archive(chat.session_id)
    chat.wait_for(lambda events: bool(of_type(events, "session.status_terminated")))
    # The worker notices at its next checkpoint, writes nothing more and lets the session go.
    wait_until(
        lambda: Session.objects.filter(pk=chat.session_id, lease_owner__isnull=True).exists(),
        what="the worker to release the archived session",
    )
    events = chat.events()
    assert events[-1]["type"] == "session.status_terminated"
    assert of_type(events, "agent.message") == [] and stop_reasons(events) == []
    assert chat.session()["status"] == "terminated" and len(model.requests) == 1


def test_a_turn_whose_workers_died_too_often_ends_with_an_error(model, open_session):
    chat = open_session()
    # As if three workers had died in this turn: the next claim is the fourth (the poll finds it).
    Session.objects.filter(pk=chat.session_id).update(status="running", turn_attempts=3)
    events = chat.wait_idle()
    [error] = of_type(events, "session.error")
    assert error["error"]["retry_status"] == {"type": "exhausted"}
    assert stop_reasons(events) == ["retries_exhausted"] and model.requests == []


def test_an_interrupt_abandons_the_graders_call(model, open_session):
    chat = grading_in_flight(model, open_session, grader_delay=30)
    started = time.monotonic()
    chat.send({"type": "user.interrupt"})
    events = chat.wait_idle(timeout=10)
    assert time.monotonic() - started < 5  # not the grader's 30 s
    assert stop_reasons(events) == ["end_turn"]  # an unwound turn ends as a finished one (decisions.md)
    outcome: Any = chat.sdk.get(f"/v1/sessions/{chat.session_id}/outcome", cast_to=object)
    assert outcome["result"] == "interrupted"


def test_a_refusal_ends_the_turn_with_its_stop_details(model, open_session):
    details = {"type": "refusal", "category": "cyber", "explanation": "Not this one."}
    model.add(replies.text("I can't help with that.", refusal=details))
    chat = open_session()
    chat.say("write malware")
    events = chat.wait_idle()
    [idle] = of_type(events, "session.status_idle")
    assert idle["stop_reason"] == {"type": "refusal"} and idle["stop_details"] == details
    assert text_of(of_type(events, "agent.message")[0]) == "I can't help with that."
    parsed = chat.sdk.beta.sessions.events.list(chat.session_id)
    [typed] = [event for event in parsed if event.type == "session.status_idle"]
    assert typed.stop_reason.type == "refusal" and typed.stop_details.category == "cyber"
