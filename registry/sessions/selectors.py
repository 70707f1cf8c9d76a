"""Reads for sessions: the public part of a resource, events in either dialect, the outcome, the stream's
reads, the tool calls awaiting confirmation, a session's (or thread's) duration, the search of the sessions, and
a session's threads."""

from __future__ import annotations

from typing import Any

from django.db import connection
from django.db.models import BooleanField, Q, QuerySet, TextField
from django.db.models.expressions import RawSQL
from django.db.models.fields.json import KT, KeyTransform
from django.db.models.functions import Cast
from django.utils import timezone

from registry.core.errors import not_found
from registry.sessions import log, thread_log
from registry.sessions.events import NATIVE_BETA_FIELD, PORTABLE_TYPES, PUBLIC_TYPES, TOOL_ANSWER_FIELDS
from registry.sessions.models import Session, SessionEvent, SessionThread, ThreadEvent, primary_thread_id

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


CONFIRMABLE_CALLS = ("agent.mcp_tool_use", "agent.tool_use")


def calls_awaiting_confirmation(session_id: str) -> QuerySet[SessionEvent]:
    """Tool calls paused by an `always_ask` policy that no confirmation has answered yet."""
    answered = SessionEvent.objects.filter(session_id=session_id, type="user.tool_confirmation")
    return SessionEvent.objects.filter(
        session_id=session_id, type__in=CONFIRMABLE_CALLS, body__evaluated_permission="ask"
    ).exclude(pk__in=answered.values(call=KT("body__tool_use_id")))


def answers_to(session_id: str, call_ids: list[str]) -> list[SessionEvent]:
    """The events answering any of these tool calls (results, and confirmations acknowledged or not yet),
    oldest first."""
    naming = Q()
    for field in set(TOOL_ANSWER_FIELDS.values()):
        naming |= Q(**{f"body__{field}__in": call_ids})
    answers = SessionEvent.objects.filter(naming, session_id=session_id, type__in=TOOL_ANSWER_FIELDS)
    return list(answers.order_by("created_at", "id"))


def duration_seconds(session: Session | SessionThread) -> float:
    """From creation to archival or termination, or until now for a session (or thread) still live."""
    finished = session.archived_at or (session.updated_at if session.status == Session.Status.TERMINATED else None)
    return ((finished or timezone.now()) - session.created_at).total_seconds()


# The words of an event's content blocks as PostgreSQL indexes them (session_event_text_idx, migration 0003).
EVENT_TEXT_MATCH = (
    "jsonb_to_tsvector('english', body -> 'content', '[\"string\"]') @@ websearch_to_tsquery('english', %s)"
)


def _events_with_text(words: str) -> QuerySet[SessionEvent]:
    """Events whose content text matches `words`: full text search on PostgreSQL, a substring elsewhere."""
    if connection.vendor == "postgresql":
        return SessionEvent.objects.filter(RawSQL(EVENT_TEXT_MATCH, [words], output_field=BooleanField()))
    content = Cast(KeyTransform("content", "body"), TextField())
    return SessionEvent.objects.alias(content=content).filter(content__icontains=words)


def sessions_matching(sessions: QuerySet[Session], words: str) -> QuerySet[Session]:
    """The sessions among `sessions` whose id, title, agent's name or metadata contain `words`, or one of
    whose events' text matches them."""
    words = words.strip()
    if not words:
        return sessions
    in_fields = (
        Q(id__icontains=words)
        | Q(title__icontains=words)
        | Q(agent__name__icontains=words)
        | Q(metadata_text__icontains=words)
    )
    in_events = Q(pk__in=_events_with_text(words).values("session_id"))
    return sessions.alias(metadata_text=Cast("metadata", TextField())).filter(in_fields | in_events)


def session_in_workspace(*, workspace_id: str, session_id: str) -> Session:
    session = Session.objects.filter(workspace_id=workspace_id, pk=session_id).first()
    if session is None:
        raise not_found(f"No session {session_id} in workspace {workspace_id}.")
    return session


# -- what the runtime reads of a session it holds --------------------------------------------------
def session_to_run(session_id: str) -> Session:
    """The session with its environment, as a turn starts."""
    return Session.objects.select_related("environment").get(pk=session_id)


def pending_events(session_id: str, *, types: tuple[str, ...] | None = None) -> list[SessionEvent]:
    """User events not yet acknowledged, in append order (only `types`, when given)."""
    pending = SessionEvent.objects.filter(session_id=session_id, seq__isnull=True)
    if types is not None:
        pending = pending.filter(type__in=types)
    return list(pending.order_by("created_at", "id"))


def visible_events_after(session_id: str, after_seq: int) -> list[SessionEvent]:
    """Every visible event after `after_seq`, in `seq` order."""
    return list(SessionEvent.objects.filter(session_id=session_id, seq__gt=after_seq).order_by("seq"))


def latest_user_traceparent(session_id: str, field: str) -> str | None:
    """The trace context stored in `field` of the latest acknowledged user event, if any."""
    traced = (
        SessionEvent.objects.filter(session_id=session_id, seq__isnull=False, type__startswith="user.")
        .order_by("-seq")
        .values_list(f"body__{field}", flat=True)
        .first()
    )
    return traced if isinstance(traced, str) else None


def session_resources(session_id: str) -> list[dict[str, Any]] | None:
    """The session's resources as stored now (None once it is gone)."""
    return Session.objects.filter(pk=session_id).values_list("resources", flat=True).first()


def session_is_live(session_id: str) -> bool:
    """The session exists and is not terminated."""
    return Session.objects.filter(pk=session_id).exclude(status=Session.Status.TERMINATED).exists()


def thread_is_live(thread_id: str) -> bool:
    """The child thread exists and is not terminated (it is once archived, or once its session ended)."""
    return SessionThread.objects.filter(pk=thread_id).exclude(status=SessionThread.Status.TERMINATED).exists()


def session_status(session_id: str) -> str | None:
    return Session.objects.filter(pk=session_id).values_list("status", flat=True).first()


def error_reported(session_id: str, kind: str) -> bool:
    """The session's log holds a `session.error` of this kind."""
    return SessionEvent.objects.filter(session_id=session_id, type="session.error", body__error__type=kind).exists()


def outcome_evaluations(session_id: str) -> list[dict[str, Any]]:
    return list(Session.objects.values_list("outcome_evaluations", flat=True).get(pk=session_id))


def sent_natively(event: SessionEvent) -> bool:
    """The user event was sent through the native beta surface (its errors then use its kinds)."""
    return bool(event.body.get(NATIVE_BETA_FIELD))


def sessions_with_work_count() -> int:
    """Sessions with work that no worker holds."""
    return Session.objects.filter(log.with_work()).count()


# -- a session's threads: the primary thread is the session itself, a child thread has its own row and log ------
def thread_in_session(session: Session, thread_id: str) -> Session | SessionThread:
    """The thread `thread_id` of `session`: the session itself for its primary thread, else the child thread's row
    (another session's thread is not found, as an unknown one)."""
    if thread_id == primary_thread_id(session.pk):
        return session
    thread = SessionThread.objects.filter(session=session, pk=thread_id).first()
    if thread is None:
        raise not_found(f"Session {session.pk} has no thread {thread_id}.")
    return thread


def child_threads(session: Session) -> QuerySet[SessionThread]:
    return SessionThread.objects.filter(session=session)


def thread_events_visible(*, thread: SessionThread, native: bool) -> QuerySet[ThreadEvent]:
    """A child thread's events the caller's dialect may see (every one is processed when written)."""
    return ThreadEvent.objects.filter(thread=thread, type__in=visible_types(native=native))


def thread_events_after(thread: SessionThread, after_seq: int, limit: int) -> tuple[list[SessionEvent], bool]:
    """The stream's read of a child thread: its events after `after_seq`, and whether the thread was terminated
    before they were read (nothing follows them then; a session that ends terminates its threads without an
    event in their logs)."""
    live = SessionThread.objects.filter(pk=thread.pk).exclude(status=SessionThread.Status.TERMINATED)
    terminated = not live.exists()
    return thread_log.events_after(thread, after_seq, limit), terminated
