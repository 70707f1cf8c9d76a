"""The runtime's pure parts (transcript, verdicts, SSE parsing, backoff) and its claims on the database."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from registry.runtime import outcomes
from registry.runtime.config import RuntimeSettings
from registry.runtime.lease import LeaseKeeper, LeaseLost
from registry.runtime.model import beta_headers, request_options, sse_events
from registry.runtime.transcript import INTERRUPTED_RESULT, awaits_model, build_messages, tool_work, turn_graded
from registry.sessions import log, services
from registry.sessions.models import Session, SessionEvent

TEXT = [{"type": "text", "text": "hi"}]


def event(kind: str, event_id: str = "", **body: Any) -> SessionEvent:
    return SessionEvent(id=event_id or f"sevt_{kind}", type=kind, body=body)


def mcp_use(event_id: str, permission: str) -> SessionEvent:
    return event(
        "agent.mcp_tool_use", event_id, name="lookup", input={}, mcp_server_name="s", evaluated_permission=permission
    )


def test_tool_calls_pair_with_results_and_consecutive_roles_merge():
    log = [
        event("user.message", content=TEXT),
        event("agent.message", content=[{"type": "text", "text": "calling"}]),
        event("agent.custom_tool_use", "sevt_call", name="lookup", input={"q": 1}),
        event("session.status_idle", stop_reason={"type": "requires_action"}),
        event("user.custom_tool_result", custom_tool_use_id="sevt_call", content=TEXT, is_error=False),
    ]
    assert build_messages(log) == [
        {"role": "user", "content": TEXT},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "calling"},
                {"type": "tool_use", "id": "sevt_call", "name": "lookup", "input": {"q": 1}},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "sevt_call", "is_error": False, "content": TEXT}],
        },
    ]
    assert awaits_model(build_messages(log)) and not awaits_model(build_messages(log[:3]))


def test_new_input_closes_abandoned_calls_and_late_results_are_dropped():
    log = [
        event("user.message", content=TEXT),
        event("agent.custom_tool_use", "sevt_call", name="lookup", input={}),
        event("user.interrupt"),
        event("user.message", "sevt_again", content=TEXT),
        event("user.custom_tool_result", custom_tool_use_id="sevt_call", content=TEXT),
    ]
    closing = build_messages(log)[-1]["content"]
    assert closing[0] == {
        "type": "tool_result",
        "tool_use_id": "sevt_call",
        "is_error": True,
        "content": [{"type": "text", "text": INTERRUPTED_RESULT}],
    }
    assert closing[1:] == TEXT  # the late result did not add a second tool_result
    assert tool_work(log).blocking == []  # calls before the boundary no longer hold the turn up


def test_tool_work_sorts_calls_by_what_answers_them():
    log = [
        event("user.message", content=TEXT),
        mcp_use("sevt_allowed", "allow"),
        mcp_use("sevt_waiting", "ask"),
        mcp_use("sevt_confirmed", "ask"),
        mcp_use("sevt_refused", "ask"),
        mcp_use("sevt_answered", "allow"),
        event("agent.custom_tool_use", "sevt_custom", name="c", input={}),
        event("user.tool_confirmation", tool_use_id="sevt_confirmed", result="allow"),
        event("user.tool_confirmation", tool_use_id="sevt_refused", result="deny"),
        event("agent.mcp_tool_result", mcp_tool_use_id="sevt_answered", content=TEXT, is_error=False),
    ]
    work = tool_work(log)
    assert [call.id for call in work.runnable] == ["sevt_allowed", "sevt_confirmed"]
    assert [(call.id, answer.body["result"]) for call, answer in work.denied] == [("sevt_refused", "deny")]
    assert work.blocking == ["sevt_waiting", "sevt_custom"]


def test_outcome_feedback_is_a_user_message_and_a_final_grade_ends_the_turn():
    outcome = event("user.define_outcome", description="a poem", rubric={"type": "text", "content": "rhymes"})
    answer = event("agent.message", content=[{"type": "text", "text": "roses"}])
    revise = event("span.outcome_evaluation_end", result="needs_revision", explanation="no rhyme", iteration=0)
    done = event("span.outcome_evaluation_end", result="satisfied", explanation="ok", iteration=1)
    messages = build_messages([outcome, answer, revise])
    assert "a poem" in messages[0]["content"][0]["text"] and "rhymes" in messages[0]["content"][0]["text"]
    assert "no rhyme" in messages[-1]["content"][0]["text"] and awaits_model(messages)
    assert not turn_graded([outcome, answer]) and not turn_graded([outcome, answer, revise])
    assert turn_graded([outcome, answer, revise, answer, done])


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ('{"verdict": "satisfied", "explanation": "fine"}', ("satisfied", "fine")),
        ('Sure!\n```json\n{"verdict": "NEEDS_REVISION", "explanation": "x"}\n```', ("needs_revision", "x")),
        (
            '{"verdict": "great"}',
            ("needs_revision", 'The grader\'s answer could not be read as a verdict: {"verdict": "great"}'),
        ),
        ("no json at all", ("needs_revision", "The grader's answer could not be read as a verdict: no json at all")),
    ],
)
def test_parse_verdict(answer, expected):
    assert outcomes.parse_verdict(answer) == expected


def test_label_marks_needs_revision_at_the_last_iteration():
    assert outcomes.label("needs_revision", iteration=2, max_iterations=3) == "needs_revision"
    assert outcomes.label("needs_revision", iteration=3, max_iterations=3) == "max_iterations_reached"
    assert outcomes.label("satisfied", iteration=5, max_iterations=3) == "satisfied"


def test_sse_events_join_data_lines_and_skip_comments():
    lines = [": ping", "event: a", "data: {", "data: }", "", "data: tail"]
    assert list(sse_events(lines)) == [("a", "{\n}"), ("message", "tail")]


def test_backoff_doubles_up_to_the_cap():
    config = RuntimeSettings(backoff_seconds=1.0, backoff_max_seconds=5.0)
    assert [config.backoff(attempt) for attempt in (1, 2, 3, 4)] == [1.0, 2.0, 4.0, 5.0]


@pytest.fixture
def session(api) -> Session:
    agent = api.post("/v1/agents", {"name": "a", "model": "m"}, format="json").json()
    environment = api.post("/v1/environments", {"name": "e"}, format="json").json()
    created = api.post("/v1/sessions", {"agent": agent["id"], "environment_id": environment["id"]}, format="json")
    return Session.objects.get(pk=created.json()["id"])


def claim(owner: str) -> list[str]:
    return [claimed.fence.session_id for claimed in log.claim(owner=owner, seconds=30, limit=10)]


def test_a_leased_session_is_claimed_again_only_after_its_lease_expires(session):
    assert claim("a") == []  # no work yet
    services.events_append(session=session, events=[{"type": "user.message", "content": TEXT}])
    [first] = log.claim(owner="a", seconds=30, limit=10)
    assert first.fence.session_id == session.id and first.attempts == 1
    assert claim("b") == []
    Session.objects.filter(pk=session.id).update(
        status=Session.Status.RUNNING, has_pending_events=False, lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    [second] = log.claim(owner="b", seconds=30, limit=10)  # an orphaned turn
    assert second.fence.token == first.fence.token + 1 and second.attempts == 2
    assert Session.objects.get(pk=session.id).lease_owner == "b"
    keeper = LeaseKeeper(owner="a", seconds=30)
    stale = keeper.hold(first)
    keeper.renew_all()
    assert stale.lost.is_set()  # the old owner lost it
    with pytest.raises(LeaseLost):
        stale.check()


def test_a_write_with_a_superseded_fence_is_refused_and_changes_nothing(session):
    services.events_append(session=session, events=[{"type": "user.message", "content": TEXT}])
    [first] = log.claim(owner="a", seconds=30, limit=1)
    Session.objects.filter(pk=session.id).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    [second] = log.claim(owner="b", seconds=30, limit=1)
    before = Session.objects.get(pk=session.id).last_seq
    with pytest.raises(LeaseLost):
        log.emit(session_id=session.id, type="agent.message", body={"content": TEXT}, fence=first.fence)
    with pytest.raises(LeaseLost):
        log.transition(session_id=session.id, status="running", fence=first.fence)
    assert Session.objects.get(pk=session.id).last_seq == before
    log.emit(session_id=session.id, type="agent.message", body={"content": TEXT}, fence=second.fence)
    assert Session.objects.get(pk=session.id).last_seq == before + 1


def test_terminated_is_final(session):
    log.transition(session_id=session.id, status="running")
    services.session_archive(session=session)
    with pytest.raises(log.SessionTerminated):
        log.transition(session_id=session.id, status="idle", stop_reason={"type": "end_turn"})
    assert Session.objects.get(pk=session.id).status == "terminated"


def test_terminated_sessions_are_never_claimed(session):
    services.events_append(session=session, events=[{"type": "user.message", "content": TEXT}])
    services.session_archive(session=session)
    assert claim("a") == []


def test_long_tool_results_are_cut_in_the_middle_of_the_transcript_only():
    long = "head " + "x" * 5000 + " tail"
    log = [
        event("user.message", content=TEXT),
        event("agent.custom_tool_use", "sevt_call", name="lookup", input={}),
        event("user.custom_tool_result", custom_tool_use_id="sevt_call", content=[{"type": "text", "text": long}]),
    ]
    [block] = build_messages(log, tool_result_limit=1000)[-1]["content"]
    text = block["content"][0]["text"]
    assert len(text) < 1100 and text.startswith("head ") and text.endswith(" tail")
    assert "truncated; the full result is in the session's event log" in text
    assert log[2].body["content"][0]["text"] == long  # the event itself is untouched


def test_the_agents_model_settings_are_sent_as_the_messages_api_takes_them():
    assert request_options({"id": "m", "effort": {"type": "high"}, "speed": "standard"}) == {}
    fast = request_options({"id": "m", "effort": {"type": "low"}, "speed": "fast", "inference_geo": "eu"})
    assert fast == {"output_config": {"effort": "low"}, "speed": "fast", "inference_geo": "eu"}
    assert beta_headers(fast) == {"anthropic-beta": "fast-mode-2026-02-01"}


def test_a_turn_claimed_too_often_is_not_claimed_as_fresh(session):
    log.transition(session_id=session.id, status="running")
    Session.objects.filter(pk=session.id).update(turn_attempts=3)
    [claimed] = log.claim(owner="a", seconds=30, limit=1)
    assert claimed.attempts == 4  # the worker ends the turn instead of running it (max 3)
