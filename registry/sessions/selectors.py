"""Reads for sessions: the public part of a resource, events in either dialect, the outcome, the stream's
reads."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from registry.core.errors import not_found
from registry.sessions.events import PORTABLE_TYPES, PUBLIC_TYPES
from registry.sessions.models import Session, SessionEvent

PUBLIC_RESOURCE_FIELDS = ("sealed_authorization_token",)


def public_resource(resource: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in resource.items() if key not in PUBLIC_RESOURCE_FIELDS}


def visible_types(*, native: bool) -> frozenset[str]:
    return PUBLIC_TYPES if native else PORTABLE_TYPES


def events_visible(*, session: Session, native: bool) -> QuerySet[SessionEvent]:
    """Processed events the caller's dialect may see."""
    return SessionEvent.objects.filter(session=session, seq__isnull=False, type__in=visible_types(native=native))


def events_after(*, session_id: str, after_seq: int, limit: int = 500) -> list[SessionEvent]:
    """The stream's read: every event after `after_seq` in seq order (the stream filters by dialect)."""
    return list(SessionEvent.objects.filter(session_id=session_id, seq__gt=after_seq).order_by("seq")[:limit])


def latest_outcome(session: Session) -> dict[str, Any] | None:
    """The latest outcome's evaluation; a defined outcome the runtime has not started on is `pending`."""
    defined = SessionEvent.objects.filter(session=session, type="user.define_outcome").order_by("-created_at").first()
    latest = session.outcome_evaluations[-1] if session.outcome_evaluations else None
    if latest is not None and (defined is None or latest["outcome_id"] == defined.body["outcome_id"]):
        return dict(latest)
    if defined is None:
        return None
    return {
        "type": "outcome_evaluation",
        "outcome_id": defined.body["outcome_id"],
        "description": defined.body["description"],
        "result": "pending",
        "explanation": None,
        "iteration": 0,
        "max_iterations": defined.body["max_iterations"],
        "completed_at": None,
    }


def session_in_workspace(*, workspace_id: str, session_id: str) -> Session:
    session = Session.objects.filter(workspace_id=workspace_id, pk=session_id).first()
    if session is None:
        raise not_found(f"No session {session_id} in workspace {workspace_id}.")
    return session
