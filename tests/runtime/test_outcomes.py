"""Outcomes end to end: grading after every turn, revision turns, `max_iterations_reached`, the endpoint."""

from __future__ import annotations

import pytest

from fakes import model as replies
from tests.support.runtime.sessions import of_type, stop_reasons, text_of

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

RUBRIC = {"type": "text", "content": "Exactly three lines, 5-7-5 syllables."}


def define(description: str, max_iterations: int) -> dict:
    return {
        "type": "user.define_outcome",
        "description": description,
        "rubric": RUBRIC,
        "max_iterations": max_iterations,
    }


def outcome(chat) -> dict:
    """`GET /v1/sessions/{id}/outcome` (the reference client has no method for it: a raw request)."""
    return chat.sdk.get(f"/v1/sessions/{chat.session_id}/outcome", cast_to=object)


def test_needs_revision_runs_another_turn_until_max_iterations(model, open_session):
    model.add(
        replies.text("Rain falls on the roof, the long night listens to it and forgets the day"),
        replies.verdict("needs_revision", "Not three lines."),
        replies.text("Rain on the roof\nthe night listens\nthe day is gone"),
        replies.verdict("needs_revision", "Syllables are off."),
    )
    chat = open_session()
    chat.send(define("A haiku about rain", max_iterations=2))
    events = chat.wait_idle(native=True)

    assert stop_reasons(events) == ["end_turn"]
    assert len(of_type(events, "agent.message")) == 2
    starts, ends = of_type(events, "span.outcome_evaluation_start"), of_type(events, "span.outcome_evaluation_end")
    assert [end["result"] for end in ends] == ["needs_revision", "max_iterations_reached"]
    assert [end["outcome_evaluation_start_id"] for end in ends] == [start["id"] for start in starts]
    assert [start["iteration"] for start in starts] == [0, 1]

    turn, grade, revision, _ = (request.body for request in model.requests)
    assert "A haiku about rain" in turn["messages"][0]["content"][0]["text"]
    assert grade["stream"] is False and RUBRIC["content"] in grade["messages"][0]["content"][0]["text"]
    assert "Not three lines." in revision["messages"][-1]["content"][0]["text"]

    latest = outcome(chat)
    assert latest["result"] == "max_iterations_reached" and latest["iteration"] == 1  # 0-indexed
    assert latest["max_iterations"] == 2 and latest["explanation"] == "Syllables are off."
    assert latest["description"] == "A haiku about rain" and latest["completed_at"]
    assert latest["outcome_id"].startswith("outc_")
    [evaluation] = chat.sdk.beta.sessions.retrieve(chat.session_id).outcome_evaluations
    assert evaluation.result == "max_iterations_reached" and evaluation.completed_at is not None

    # Past max_iterations evaluation goes on after every turn; only the label changes.
    model.add(replies.text("One more try"), replies.verdict("needs_revision", "Still off."))
    chat.say("try once more")
    events = chat.wait_idle(2)
    assert stop_reasons(events) == ["end_turn", "end_turn"] and len(model.requests) == 6
    assert outcome(chat)["iteration"] == 2 and outcome(chat)["result"] == "max_iterations_reached"


def test_satisfied_outcome_ends_the_turn(model, open_session):
    model.add(
        replies.text("Rain on tin roof\nsoft drums in the dark\nsleep comes"), replies.verdict("satisfied", "Good.")
    )
    chat = open_session()
    chat.send(define("A haiku about rain", max_iterations=3))
    events = chat.wait_idle()
    assert stop_reasons(events) == ["end_turn"] and text_of(of_type(events, "agent.message")[0]).startswith("Rain")
    latest = outcome(chat)
    assert latest["result"] == "satisfied" and latest["iteration"] == 0 and latest["max_iterations"] == 3
    assert not [event for event in events if event["type"].startswith("span.")]  # native-only types


def test_unreadable_grade_counts_as_needs_revision(model, open_session):
    model.add(replies.text("draft"), replies.text("I think it is fine?"))
    chat = open_session()
    chat.send(define("Anything", max_iterations=1))
    chat.wait_idle()
    latest = outcome(chat)
    assert latest["result"] == "max_iterations_reached" and "I think it is fine?" in latest["explanation"]


def test_needs_revision_puts_the_outcome_back_to_running_with_the_feedback(model, open_session):
    model.add(
        replies.text("draft"),
        replies.verdict("needs_revision", "Too short."),
        replies.text("longer draft", delay=1.0),
        replies.verdict("satisfied", "Fine."),
    )
    chat = open_session()
    chat.send(define("Anything", max_iterations=3))
    seen: list[tuple[str, int]] = []

    def revising(events: list[dict]) -> bool:
        latest = outcome(chat)
        seen.append((latest["result"], latest["iteration"]))
        return latest["result"] == "running" and latest["iteration"] == 1

    chat.wait_for(revising)
    assert outcome(chat)["explanation"] == "Too short." and outcome(chat)["completed_at"] is None
    chat.wait_idle()
    assert outcome(chat)["result"] == "satisfied" and outcome(chat)["iteration"] == 1


def test_a_file_rubric_is_read_by_the_grader(model, open_session, sdk):
    rubric = sdk.beta.files.upload(file=("rubric.md", b"Must mention the word PELICAN.", "text/markdown"))
    model.add(replies.text("A pelican poem"), replies.verdict("satisfied", "Mentions it."))
    chat = open_session()
    chat.send(
        {"type": "user.define_outcome", "description": "A poem", "rubric": {"type": "file", "file_id": rubric.id}}
    )
    chat.wait_idle()
    grade = model.requests[1].body
    assert "Must mention the word PELICAN." in grade["messages"][0]["content"][0]["text"]
    assert outcome(chat)["result"] == "satisfied"
