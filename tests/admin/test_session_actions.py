"""Acting on a session from its admin page through Django's test client: each action writes through the
services as the API does (the same events), answers with a message and is recorded in the admin log; a
wrong-state action says why and writes nothing; only an operator of the session's workspace may act."""

from __future__ import annotations

import dataclasses
import json

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.test import Client

from registry.sessions import admin_actions, log, services
from registry.sessions.models import Session, SessionEvent
from tests.support.admin_pages import SESSIONS, on, page
from tests.support.admin_staff import staff_client
from tests.support.admin_turns import PENDING_INPUT, STAFF_PASSWORD, Turn, write_pending_confirmation
from tests.support.tenants import Tenant


@pytest.fixture
def pending(turn: Turn) -> str:
    """The id of a tool call the session awaits a confirmation for."""
    return write_pending_confirmation(turn.session_id)


def act(console: Client, session_id: str, action: str, **data: str) -> list[str]:
    """POST the action; the messages the page shows afterwards."""
    response = console.post(on(SESSIONS, session_id, f"actions/{action}"), data, follow=True)
    assert response.redirect_chain == [(on(SESSIONS, session_id), 302)]
    return [str(message) for message in response.context["messages"]]


def user_events(session_id: str) -> list[SessionEvent]:
    return list(SessionEvent.objects.filter(session_id=session_id, type__startswith="user.").order_by("created_at"))


def logged(session_id: str) -> list[str]:
    entries = LogEntry.objects.filter(object_id=session_id, action_flag=CHANGE).order_by("action_time")
    return [entry.get_change_message() for entry in entries]


# -- each action, through the services ------------------------------------------------------------------
def test_a_message_is_appended_as_the_api_appends_it(console, turn: Turn):
    before = len(user_events(turn.session_id))
    assert act(console, turn.session_id, "message", text="Please list /etc too.") == ["Sent a message."]
    sent = user_events(turn.session_id)[before:]
    assert [(event.type, event.body["content"]) for event in sent] == [
        ("user.message", [{"type": "text", "text": "Please list /etc too."}])
    ]
    assert sent[0].seq is None and Session.objects.get(pk=turn.session_id).has_pending_events is True
    assert logged(turn.session_id) == ["Sent a message."]


def test_a_running_turn_is_interrupted(console, turn: Turn):
    log.transition(session_id=turn.session_id, status="running")
    assert act(console, turn.session_id, "interrupt") == ["Interrupted the session's turn."]
    assert user_events(turn.session_id)[-1].type == "user.interrupt"
    assert logged(turn.session_id) == ["Interrupted the session's turn."]


@pytest.mark.parametrize("result", ["allow", "deny"])
def test_a_pending_tool_call_is_confirmed_once(console, turn: Turn, pending: str, result: str):
    said = act(console, turn.session_id, "confirm", tool_use_id=pending, result=result, deny_message="not today")
    verb = "Allowed" if result == "allow" else "Denied"
    assert said == [f"{verb} tool call {pending}."]
    confirmation = user_events(turn.session_id)[-1]
    expected = {"tool_use_id": pending, "result": result, **({"deny_message": "not today"} if result == "deny" else {})}
    assert confirmation.type == "user.tool_confirmation"
    assert {key: confirmation.body[key] for key in expected} == expected and len(confirmation.body) == len(expected)

    again = act(console, turn.session_id, "confirm", tool_use_id=pending, result="allow")
    assert again == [f"Tool call {pending} was already answered ({result}): nothing was sent."]
    assert user_events(turn.session_id)[-1].pk == confirmation.pk
    assert logged(turn.session_id) == [said[0]]


def test_an_archive_terminates_the_session(console, turn: Turn):
    assert act(console, turn.session_id, "archive") == ["Archived the session: it is terminated."]
    session = Session.objects.get(pk=turn.session_id)
    assert session.archived_at is not None and session.status == "terminated"
    assert SessionEvent.objects.filter(session=session, type="session.status_terminated").count() == 1
    assert logged(turn.session_id) == ["Archived the session: it is terminated."]


# -- wrong states: a message, nothing written -----------------------------------------------------------
def test_a_terminated_session_refuses_every_action(console, turn: Turn, pending: str):
    services.session_archive(session=Session.objects.get(pk=turn.session_id))
    before = user_events(turn.session_id)
    terminated = "The session is terminated: it accepts no more events."
    assert act(console, turn.session_id, "message", text="hello?") == [terminated]
    assert act(console, turn.session_id, "interrupt") == [terminated]
    assert act(console, turn.session_id, "confirm", tool_use_id=pending, result="allow") == [terminated]
    assert act(console, turn.session_id, "archive") == ["The session is already archived."]
    assert user_events(turn.session_id) == before and logged(turn.session_id) == []


def test_wrong_state_actions_say_why(console, turn: Turn, pending: str):
    before = user_events(turn.session_id)
    assert act(console, turn.session_id, "interrupt") == ["The session is idle: there is no turn to interrupt."]
    assert act(console, turn.session_id, "message", text="   ") == ["Write a message to send."]
    assert act(console, turn.session_id, "confirm", tool_use_id=pending, result="maybe") == ["Choose allow or deny."]
    unknown = act(console, turn.session_id, "confirm", tool_use_id="sevt_unknown", result="allow")
    assert unknown == ["No tool call sevt_unknown is awaiting confirmation: nothing was sent."]
    assert user_events(turn.session_id) == before and logged(turn.session_id) == []


def test_a_call_answered_by_its_result_is_no_longer_awaiting(console, turn: Turn, pending: str):
    """New input superseded the call: the runtime wrote its error result, so there is nothing to confirm."""
    log.emit(
        session_id=turn.session_id, type="agent.mcp_tool_result", body={"mcp_tool_use_id": pending, "is_error": True}
    )
    said = act(console, turn.session_id, "confirm", tool_use_id=pending, result="allow")
    assert said == [f"Tool call {pending} was already answered (it has its result): nothing was sent."]
    assert 'class="pending-confirmation"' not in page(console, on(SESSIONS, turn.session_id))


def test_the_services_refusal_is_shown_when_the_state_changed_meanwhile(console, turn: Turn, monkeypatch):
    """What the page checks first can change before the write: the service's own check then answers."""
    unchecked = dataclasses.replace(admin_actions.ACTIONS["message"], refusal=lambda session, data: None)
    monkeypatch.setitem(admin_actions.ACTIONS, "message", unchecked)
    services.session_archive(session=Session.objects.get(pk=turn.session_id))
    said = act(console, turn.session_id, "message", text="late")
    assert said == ["Refused: session_terminated: this session is terminated and accepts no more events."]
    assert logged(turn.session_id) == []


def test_a_message_the_api_would_refuse_is_refused_with_its_reason(console, turn: Turn):
    before = user_events(turn.session_id)
    [said] = act(console, turn.session_id, "message", text="nul \x00 inside")
    assert said.startswith("Refused: events: ") and "Null characters are not allowed." in said
    assert user_events(turn.session_id) == before and logged(turn.session_id) == []


def test_actions_are_posts_with_a_csrf_token(console, turn: Turn):
    url = on(SESSIONS, turn.session_id, "actions/message")
    assert console.get(url).status_code == 405
    assert console.post(on(SESSIONS, turn.session_id, "actions/explode"), {}).status_code == 404
    checked = Client(enforce_csrf_checks=True)
    checked.login(username="staff", password=STAFF_PASSWORD)
    assert checked.post(url, {"text": "no token"}).status_code == 403
    assert user_events(turn.session_id)[-1].body["content"][0]["text"] != "no token"


# -- roles ---------------------------------------------------------------------------------------------
def test_a_viewer_reads_but_cannot_act(tenant: Tenant, turn: Turn, pending: str):
    viewer = staff_client("viewer", {tenant.workspace: "viewer"})
    html = page(viewer, on(SESSIONS, turn.session_id))
    assert 'class="pending-confirmation"' in html  # what waits is shown...
    for form in ('id="send-message"', 'class="confirm-allow"', 'id="archive-session"', "actions/"):
        assert form not in html, form  # ...without a way to act
    assert "takes the operator role" in html
    live = viewer.get(on(SESSIONS, turn.session_id, "transcript")).json()
    assert "confirm-allow" not in live["actions"]
    before = user_events(turn.session_id)
    for action, data in (("message", {"text": "hi"}), ("confirm", {"tool_use_id": pending, "result": "allow"})):
        assert viewer.post(on(SESSIONS, turn.session_id, f"actions/{action}"), data).status_code == 403
    assert viewer.post(on(SESSIONS, turn.session_id, "actions/archive")).status_code == 403
    assert user_events(turn.session_id) == before and Session.objects.get(pk=turn.session_id).archived_at is None


def test_an_operator_of_the_workspace_acts(tenant: Tenant, turn: Turn, pending: str):
    operator = staff_client("operator", {tenant.workspace: "operator"})
    html = page(operator, on(SESSIONS, turn.session_id))
    assert 'id="send-message"' in html and 'class="confirm-allow"' in html and 'id="archive-session"' in html
    assert act(operator, turn.session_id, "confirm", tool_use_id=pending, result="allow") == [
        f"Allowed tool call {pending}."
    ]
    assert LogEntry.objects.get(object_id=turn.session_id).user.username == "operator"


def test_an_operator_of_another_workspace_cannot_act(tenant: Tenant, other_tenant: Tenant, turn: Turn):
    outsider = staff_client("outsider", {other_tenant.workspace: "operator"})
    response = outsider.post(on(SESSIONS, turn.session_id, "actions/message"), {"text": "hi"})
    assert response.status_code in (403, 404)
    assert logged(turn.session_id) == []


# -- what the page shows -----------------------------------------------------------------------------------
def test_the_page_shows_a_pending_call_with_its_input_and_the_actions(console, turn: Turn, pending: str):
    html = page(console, on(SESSIONS, turn.session_id))
    call = html[html.index('class="pending-confirmation"') :]
    assert "lookup_order" in call and "on shop" in call and pending in call
    assert json.dumps(PENDING_INPUT, indent=2).replace('"', "&quot;") in call
    assert call.index('class="confirm-allow"') < call.index('class="confirm-deny"')
    assert 'name="csrfmiddlewaretoken"' in call
    assert ">Requires action</dd>" in html
    assert 'id="interrupt-session"' not in html  # idle, nothing waiting for the runtime


def test_the_live_read_carries_the_actions_the_timeline_and_event_ids(console, turn: Turn, pending: str):
    url = on(SESSIONS, turn.session_id, "transcript")
    first = console.get(url).json()
    assert pending in first["actions"] and pending in first["actions_key"] and "lookup_order" in first["timeline"]
    assert pending in first["event_ids"] and first["running"] is False
    act(console, turn.session_id, "confirm", tool_use_id=pending, result="deny")
    later = console.get(url, {"after": first["last_seq"]}).json()
    assert pending not in later["actions"] and later["actions_key"] != first["actions_key"]


def test_the_timeline_places_each_call_from_its_use_to_its_result(console, turn: Turn, pending: str):
    timeline = page(console, on(SESSIONS, turn.session_id)).split('id="tool-timeline-rows"')[1]
    rows = timeline[: timeline.index("</table>")].split('<tr class="state-')[1:]
    assert [row.split('"')[0] for row in rows] == ["done", "awaiting-confirmation"]
    assert "<td>bash</td>" in rows[0] and "<td>lookup_order</td>" in rows[1]
    assert 'style="margin-left: 0.00%;' in rows[0] and "width: " in rows[1]
