"""Staff actions on a session from its admin page: send a message, interrupt, allow or deny a tool call awaiting
confirmation, archive.

Each action writes through `registry.sessions.services` as the API does (the same validation, the same events),
needs the operator role in the session's workspace, is a POST with a CSRF token, answers with a Django message
and is recorded in the admin log. An action the session's state does not allow says why and writes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.utils import quote, unquote
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect, QueryDict
from django.urls import URLPattern, path, reverse
from rest_framework.exceptions import APIException

from registry.core.admin import problems
from registry.core.admin_reading import pretty, viewable
from registry.sessions import selectors, services
from registry.sessions.events import TOOL_ANSWER_FIELDS, validated_events
from registry.sessions.models import Session, SessionEvent
from registry.workspaces.staff import has_role

OPERATOR = "operator"
URL_NAME = "agent_sessions_session_action"
INTERRUPTIBLE = (Session.Status.RUNNING, Session.Status.RESCHEDULING)
TERMINATED = "The session is terminated: it accepts no more events."


@dataclass(frozen=True)
class Action:
    """What the session's state refuses (a sentence, or None) and what the action writes (returns the sentence
    staff read and the admin log records)."""

    refusal: Callable[[Session, QueryDict], str | None]
    perform: Callable[[Session, QueryDict], str]


def can_act(user: Any, session: Session) -> bool:
    return has_role(user, session.workspace_id, OPERATOR)


def _append(session: Session, event: dict[str, Any]) -> list[SessionEvent]:
    """One user event, validated and appended exactly as `POST /v1/sessions/{id}/events` does."""
    events = validated_events({"events": [event]})
    return services.events_append(session_id=session.pk, workspace_id=session.workspace_id, events=events)


# -- send a message ---------------------------------------------------------------------------------
def _message_refusal(session: Session, data: QueryDict) -> str | None:
    if session.status == Session.Status.TERMINATED:
        return TERMINATED
    return None if data.get("text", "").strip() else "Write a message to send."


def _send_message(session: Session, data: QueryDict) -> str:
    _append(session, {"type": "user.message", "content": [{"type": "text", "text": data["text"]}]})
    return "Sent a message."


# -- interrupt --------------------------------------------------------------------------------------
def interruptible(session: Session) -> bool:
    """A turn is in flight, or user events wait for one to start."""
    return session.status in INTERRUPTIBLE or session.has_pending_events


def _interrupt_refusal(session: Session, data: QueryDict) -> str | None:
    if session.status == Session.Status.TERMINATED:
        return TERMINATED
    return None if interruptible(session) else f"The session is {session.status}: there is no turn to interrupt."


def _interrupt(session: Session, data: QueryDict) -> str:
    _append(session, {"type": "user.interrupt"})
    return "Interrupted the session's turn."


# -- allow or deny a tool call ------------------------------------------------------------------------
def awaiting_confirmation(session: Session) -> list[SessionEvent]:
    """The calls staff may allow or deny now: no confirmation yet, and no result either (a call that new input
    superseded already has its error result)."""
    asked = list(selectors.calls_awaiting_confirmation(session.pk).exclude(seq=None).order_by("seq"))
    answers = selectors.answers_to(session.pk, [call.id for call in asked])
    answered = {answer.body.get(TOOL_ANSWER_FIELDS[answer.type]) for answer in answers}
    return [call for call in asked if call.id not in answered]


def _confirmation_refusal(session: Session, data: QueryDict) -> str | None:
    call_id = data.get("tool_use_id", "")
    if session.status == Session.Status.TERMINATED:
        return TERMINATED
    if data.get("result") not in ("allow", "deny"):
        return "Choose allow or deny."
    if call_id in {call.id for call in awaiting_confirmation(session)}:
        return None
    earlier = selectors.answers_to(session.pk, [call_id])
    if earlier:
        return f"Tool call {call_id} was already answered ({_answer_text(earlier[0])}): nothing was sent."
    return f"No tool call {call_id} is awaiting confirmation: nothing was sent."


def _answer_text(answer: SessionEvent) -> str:
    return str(answer.body.get("result")) if answer.type == "user.tool_confirmation" else "it has its result"


def _confirm(session: Session, data: QueryDict) -> str:
    event = {"type": "user.tool_confirmation", "tool_use_id": data["tool_use_id"], "result": data["result"]}
    if data["result"] == "deny" and data.get("deny_message", "").strip():
        event["deny_message"] = data["deny_message"]
    _append(session, event)
    verb = "Allowed" if data["result"] == "allow" else "Denied"
    return f"{verb} tool call {data['tool_use_id']}."


# -- archive ------------------------------------------------------------------------------------------
def _archive_refusal(session: Session, data: QueryDict) -> str | None:
    return "The session is already archived." if session.archived_at is not None else None


def _archive(session: Session, data: QueryDict) -> str:
    services.session_archive(session=session)
    return "Archived the session: it is terminated."


ACTIONS = {
    "message": Action(_message_refusal, _send_message),
    "interrupt": Action(_interrupt_refusal, _interrupt),
    "confirm": Action(_confirmation_refusal, _confirm),
    "archive": Action(_archive_refusal, _archive),
}


# -- the view -----------------------------------------------------------------------------------------
def change_url(session: Session) -> str:
    return reverse("admin:agent_sessions_session_change", args=[quote(session.pk)])


def act(model_admin: admin.ModelAdmin, request: HttpRequest, object_id: str, name: str) -> HttpResponse:  # type: ignore[type-arg]
    """Run one action on the session, then back to its page with the outcome as a message."""
    action = ACTIONS.get(name)
    if action is None:
        raise Http404
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    session = _operated(model_admin, request, object_id)
    back = HttpResponseRedirect(change_url(session))
    refusal = action.refusal(session, request.POST)
    if refusal is not None:
        messages.error(request, refusal)
        return back
    try:
        done = action.perform(session, request.POST)
    except APIException as error:
        messages.error(request, "Refused: " + "; ".join(problems(error.detail)))
        return back
    model_admin.log_change(request, session, done)
    messages.success(request, done)
    return back


def _operated(model_admin: admin.ModelAdmin, request: HttpRequest, object_id: str) -> Session:  # type: ignore[type-arg]
    """The session, when the user may see it on its page and act on it as an operator of its workspace."""
    session: Session = viewable(model_admin, request, unquote(object_id))
    if not can_act(request.user, session):
        raise PermissionDenied
    return session


def action_urls(model_admin: admin.ModelAdmin) -> list[URLPattern]:  # type: ignore[type-arg]
    """`<id>/actions/<name>/` for each action, behind the admin's login and CSRF checks."""

    def view(request: HttpRequest, object_id: str, name: str) -> HttpResponse:
        return act(model_admin, request, object_id, name)

    wrapped = model_admin.admin_site.admin_view(view)
    return [path("<path:object_id>/actions/<slug:name>/", wrapped, name=URL_NAME)]


# -- what the page shows -------------------------------------------------------------------------------
def _pending(call: SessionEvent) -> dict[str, Any]:
    return {
        "id": call.id,
        "name": call.body.get("name"),
        "server": call.body.get("mcp_server_name"),
        "input": pretty(call.body.get("input") or {}),
    }


def panel(request: HttpRequest, session: Session) -> dict[str, Any]:
    """The actions block of the session's page: what the user may do now, and where each action posts."""
    live = session.status != Session.Status.TERMINATED
    confirmations = [_pending(call) for call in awaiting_confirmation(session)] if live else []
    allowed = can_act(request.user, session)
    stoppable = live and interruptible(session)
    return {
        "can_act": allowed,
        "live": live,
        "archived": session.archived_at is not None,
        "interruptible": stoppable,
        "confirmations": confirmations,
        "urls": {name: reverse(f"admin:{URL_NAME}", args=[quote(session.pk), name]) for name in ACTIONS},
        # What the live part shows, without its CSRF tokens (masked anew on each render): the page replaces
        # that part only when this changes, so a deny reason being typed survives the reads in between.
        "key": f"{allowed}:{stoppable}:" + ",".join(call["id"] for call in confirmations),
    }
