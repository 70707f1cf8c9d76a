"""Reads for sessions: the session object, events in either dialect, the outcome, the stream's reads."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.utils import timezone

from registry.core.errors import not_found
from registry.core.serialization import timestamp
from registry.core.tracing import TRACEPARENT_FIELD
from registry.sessions.events import ENVELOPE_FIELDS, NATIVE_BETA_FIELD, PORTABLE_TYPES, PUBLIC_TYPES
from registry.sessions.models import Session, SessionEvent

PUBLIC_RESOURCE_FIELDS = ("sealed_authorization_token",)


def render_session(session: Session) -> dict[str, Any]:
    finished = session.archived_at or (session.updated_at if session.status == Session.Status.TERMINATED else None)
    duration = ((finished or timezone.now()) - session.created_at).total_seconds()
    return {
        "id": session.id,
        "type": "session",
        "agent": {
            "type": "agent",
            "id": session.agent_id,
            "version": session.agent_version,
            **_agent_fields(session.agent_snapshot),
        },
        "environment_id": session.environment_id,
        "harness": session.harness,
        "title": session.title,
        "metadata": session.metadata,
        "vault_ids": session.vault_ids,
        "resources": [public_resource(resource) for resource in session.resources],
        "status": session.status,
        "stop_reason": session.stop_reason,
        "usage": {**session.usage, "active_seconds": session.active_seconds},
        "stats": {"active_seconds": session.active_seconds, "duration_seconds": duration},
        "outcome_evaluations": session.outcome_evaluations,
        "budget": session.budget,
        "created_at": timestamp(session.created_at),
        "updated_at": timestamp(session.updated_at),
        "archived_at": timestamp(session.archived_at),
    }


def _agent_fields(spec: dict[str, Any]) -> dict[str, Any]:
    keys = (
        "name",
        "description",
        "model",
        "system",
        "tools",
        "mcp_servers",
        "skills",
        "execution_identity",
        "multiagent",
    )
    return {key: spec.get(key) for key in keys}


def public_resource(resource: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in resource.items() if key not in PUBLIC_RESOURCE_FIELDS}


def render_event(event: SessionEvent, *, native: bool) -> dict[str, Any]:
    """An event body; the default dialect drops the transcript envelope (`seq`, `subpath`)."""
    body = {"id": event.id, "type": event.type, **event.body, "processed_at": timestamp(event.processed_at)}
    body.pop(NATIVE_BETA_FIELD, None)
    body.pop(TRACEPARENT_FIELD, None)
    if native:
        body["seq"] = event.seq
        body.setdefault("subpath", None)
    else:
        for field in ENVELOPE_FIELDS:
            body.pop(field, None)
    return body


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
