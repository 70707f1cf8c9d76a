"""The child threads' logs: the only code that writes a thread's events, status and usage.

Every write locks the session row with the writer's fence (`log.locked`), as the session's own writes
do, then the thread row, whose `last_seq` gives the thread's events a gap-free `seq` of their own. What
the reference client documents for the parent's stream is written there in the same transaction:
`session.thread_created` in the parent thread's log, the thread's status events cross-posted to the
primary thread's (the session's) log, and each agent-to-agent message as `agent.thread_message_sent` in
the sender's log and `agent.thread_message_received` in the receiver's. A thread's creation and its moves to
idle and terminated write their webhook event (`session.thread_*`, `THREAD_WEBHOOKS`) in the same transaction.

The runtime reads every log as `SessionEvent` records (`as_log_event`): a thread's turn runs the same
code as the session's.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from registry.core.errors import invalid_request
from registry.sessions import log, notify
from registry.sessions.models import Session, SessionEvent, SessionThread, ThreadEvent, primary_thread_id
from registry.webhooks import outbox

Status = SessionThread.Status
THREAD_STATUS_EVENTS = {
    Status.RUNNING: "session.thread_status_running",
    Status.IDLE: "session.thread_status_idle",
    Status.RESCHEDULING: "session.thread_status_rescheduled",
    Status.TERMINATED: "session.thread_status_terminated",
}
# The webhook event of a thread's move to a status (a thread running or rescheduling has none).
THREAD_WEBHOOKS = {Status.IDLE: "session.thread_idled", Status.TERMINATED: "session.thread_terminated"}
# Written to the receiving log when the reply was handed over by a tool result: shown, not replayed to the model.
DELIVERED_FIELD = "_delivered"
# The thread a cross-posted call (and its answer) belongs to, in the primary thread's log.
THREAD_FIELD = "session_thread_id"
# User events that answer a call, by the field naming it.
ANSWER_FIELDS = {
    "user.tool_result": "tool_use_id",
    "user.custom_tool_result": "custom_tool_use_id",
    "user.tool_confirmation": "tool_use_id",
}
CROSS_POSTED_TYPES = frozenset(
    {"agent.tool_use", "agent.custom_tool_use", "agent.mcp_tool_use", "agent.tool_result", "agent.mcp_tool_result"}
    | set(ANSWER_FIELDS)
)


# One side of an agent-to-agent message: its thread's id and its agent's name (None for the primary agent).
Party = tuple[str, str | None]


THREADS = SessionThread._meta.db_table
# A terminated thread's log takes nothing more: its status event is its last.
NEXT_SEQ = (
    f"UPDATE {THREADS} SET last_seq = last_seq + 1, updated_at = %s WHERE id = %s AND status <> %s RETURNING last_seq"
)


class ThreadLimit(Exception):
    """A thread could not be created: the session has as many threads as it may."""


class ThreadTerminated(Exception):
    """A write to the log of a terminated thread (archived, or its session ended): it takes no more events."""


def as_log_event(row: ThreadEvent, session_id: str) -> SessionEvent:
    """A thread's event as the runtime and the API read every event."""
    return SessionEvent(
        id=row.id,
        session_id=session_id,
        seq=row.seq,
        type=row.type,
        body=row.body,
        created_at=row.created_at,
        processed_at=row.processed_at,
    )


def events_after(thread: SessionThread, after_seq: int, limit: int | None = None) -> list[SessionEvent]:
    rows = ThreadEvent.objects.filter(thread=thread, seq__gt=after_seq).order_by("seq")
    return [as_log_event(row, thread.session_id) for row in (rows[:limit] if limit else rows)]


# -- writing, under the session's lock ------------------------------------------------------------------
def _post(
    session: Session, thread_id: str, type: str, body: dict[str, Any], event_id: str | None = None
) -> SessionEvent:
    """An event in the log of `thread_id` (the primary thread's is the session's); the session is locked."""
    now = timezone.now()
    ids = {"id": event_id} if event_id else {}
    if thread_id == primary_thread_id(session.pk):
        event = SessionEvent(session_id=session.pk, type=type, body=body, created_at=now, processed_at=now, **ids)
        log.insert_locked(event, session)
        return event
    with connection.cursor() as cursor:  # the next seq, taken in one statement (the row stays locked)
        cursor.execute(NEXT_SEQ, [now, thread_id, Status.TERMINATED])
        taken = cursor.fetchone()
    if taken is None:
        raise ThreadTerminated(f"thread {thread_id} is terminated (archived, or its session ended)")
    (seq,) = taken
    row = ThreadEvent.objects.create(
        thread_id=thread_id, seq=seq, type=type, body=body, created_at=now, processed_at=now, **ids
    )
    return as_log_event(row, session.pk)


def create(
    *,
    session_id: str,
    parent_thread_id: str,
    depth: int,
    agent_name: str,
    agent: dict[str, Any],
    max_threads: int,
    fence: log.Fence | None,
    task: tuple[Party, list[dict[str, Any]]] | None = None,
) -> SessionThread:
    """A new child thread, announced in its parent's log; `ThreadLimit` past `max_threads`. With a `task`
    (`(sender, content)`) it is sent that message and runs, in the same transaction; without, it is idle."""
    with transaction.atomic():
        session = log.locked(session_id, fence)
        if SessionThread.objects.filter(session_id=session_id).count() >= max_threads:
            raise ThreadLimit(f"This session already has {max_threads} threads, as many as it may have.")
        thread = SessionThread.objects.create(
            session_id=session_id, parent_thread_id=parent_thread_id, depth=depth, agent_name=agent_name, agent=agent
        )
        body = {"session_thread_id": thread.pk, "agent_name": agent_name, "workflow_run_id": None}
        _post(session, parent_thread_id, "session.thread_created", body)
        _emit_webhook(session, thread, "session.thread_created")
        if task is not None:
            sender, content = task
            _message_locked(session, sender, (thread.pk, agent_name), content, delivered=False)
            _transition_locked(session, thread, Status.RUNNING)
    notify.wake_after_commit(session_id)
    return thread


def emit(
    *, thread: SessionThread, type: str, body: dict[str, Any], fence: log.Fence | None, cross_post: bool = False
) -> SessionEvent:
    """An event of the thread; `cross_post`: a call the client answers (or its answer), shown on the primary
    thread's log too, under the same id and naming the thread (`THREAD_FIELD`), as the reference client expects."""
    with transaction.atomic():
        session = log.locked(thread.session_id, fence)
        event = _post(session, thread.pk, type, body)
        if cross_post:
            _post(session, primary_thread_id(session.pk), type, {**body, THREAD_FIELD: thread.pk}, event.id)
    notify.wake_after_commit(thread.session_id)
    return event


def route_answers(session: Session, answers: list[SessionEvent]) -> None:
    """User events answering a child thread's call (cross-posted to the session's log) go to that thread's
    log too, in the caller's transaction; the session's copy names the thread (the runtime leaves it)."""
    by_call = {event.body.get(ANSWER_FIELDS[event.type]): event for event in answers if event.type in ANSWER_FIELDS}
    if not by_call:
        return
    calls = SessionEvent.objects.filter(session=session, pk__in=list(by_call), body__has_key=THREAD_FIELD)
    for call_id, body in calls.values_list("pk", "body"):
        answer = by_call[call_id]
        answer.body[THREAD_FIELD] = body[THREAD_FIELD]
        try:
            _post(session, body[THREAD_FIELD], answer.type, dict(answer.body))
        except ThreadTerminated:
            raise invalid_request(
                f"{answer.type}: the call {call_id} is of thread {body[THREAD_FIELD]}, which is terminated and "
                "takes no more input."
            ) from None


def child_named(event: SessionEvent) -> str | None:
    """The child thread a session's `user.interrupt` names, if it names one (else it is the whole session's)."""
    thread_id = event.body.get(THREAD_FIELD)
    return thread_id if thread_id and thread_id != primary_thread_id(event.session_id) else None


def cross_posted(event: SessionEvent) -> bool:
    """A child thread's call or answer in the primary thread's log (not the primary thread's own)."""
    return event.type in CROSS_POSTED_TYPES and THREAD_FIELD in event.body


def transition(
    *,
    thread: SessionThread,
    status: str,
    stop_reason: dict[str, Any] | None = None,
    fence: log.Fence | None,
) -> None:
    """The thread's new status, its event in its own log and cross-posted to the primary thread's."""
    with transaction.atomic():
        _transition_locked(log.locked(thread.session_id, fence), thread, status, stop_reason)
    notify.wake_after_commit(thread.session_id)


def _transition_locked(
    session: Session, thread: SessionThread, status: str, stop_reason: dict[str, Any] | None = None
) -> None:
    current = SessionThread.objects.select_for_update().only("status", "started_at").get(pk=thread.pk)
    if current.status == status or current.status == Status.TERMINATED:
        return
    body: dict[str, Any] = {"session_thread_id": thread.pk, "agent_name": thread.agent_name}
    if status == Status.IDLE:
        body["stop_reason"] = stop_reason
    _post(session, thread.pk, THREAD_STATUS_EVENTS[Status(status)], body)  # before the status: a terminated log
    _post(session, primary_thread_id(session.pk), THREAD_STATUS_EVENTS[Status(status)], body)  # takes none
    now = timezone.now()
    fields: dict[str, Any] = {"status": status, "updated_at": now}
    if status == Status.IDLE:
        fields["stop_reason"] = stop_reason
    if current.started_at is None and status == Status.RUNNING:
        fields["started_at"] = now
    SessionThread.objects.filter(pk=thread.pk).update(**fields)
    thread.status = status
    if status in THREAD_WEBHOOKS:
        _emit_webhook(session, thread, THREAD_WEBHOOKS[Status(status)])


def _emit_webhook(session: Session, thread: SessionThread, event_type: str) -> None:
    """A thread's webhook event: its `id` is the session's, `session_thread_id` the thread's."""
    outbox.emit(event_type, workspace_id=session.workspace_id, object_id=session.pk, session_thread_id=thread.pk)


def message(
    *,
    session_id: str,
    sender: Party,
    receiver: Party,
    content: list[dict[str, Any]],
    delivered: bool,
    fence: log.Fence | None,
) -> SessionEvent:
    """An agent-to-agent message: `(thread id, agent name)` of each side (the primary agent's name is None).
    `delivered`: the receiver was handed it by a tool result (it is shown, not replayed to its model)."""
    with transaction.atomic():
        event = _message_locked(log.locked(session_id, fence), sender, receiver, content, delivered=delivered)
    notify.wake_after_commit(session_id)
    return event


def deliver(*, thread: SessionThread, sender: Party, content: list[dict[str, Any]], fence: log.Fence | None) -> None:
    """A message to a child thread, which runs to answer it (in one transaction: a takeover finds both)."""
    with transaction.atomic():
        session = log.locked(thread.session_id, fence)
        _message_locked(session, sender, (thread.pk, thread.agent_name), content, delivered=False)
        _transition_locked(session, thread, Status.RUNNING)
    notify.wake_after_commit(thread.session_id)


def _message_locked(
    session: Session, sender: Party, receiver: Party, content: list[dict[str, Any]], *, delivered: bool
) -> SessionEvent:
    sent: dict[str, Any] = {"to_session_thread_id": receiver[0], "content": content}
    received: dict[str, Any] = {"from_session_thread_id": sender[0], "content": content}
    if receiver[1] is not None:
        sent["to_agent_name"] = receiver[1]
    if sender[1] is not None:
        received["from_agent_name"] = sender[1]
    if delivered:
        received[DELIVERED_FIELD] = True
    _post(session, sender[0], "agent.thread_message_sent", sent)
    return _post(session, receiver[0], "agent.thread_message_received", received)


def add_usage(
    *,
    thread: SessionThread,
    usage: dict[str, int],
    active_seconds: float = 0.0,
    list_cost_usd: Decimal = log.ZERO,
    fence: log.Fence | None,
) -> None:
    """A model call of the thread: counted in the thread's usage and folded into the session's."""
    with transaction.atomic():
        log.add_usage(
            session_id=thread.session_id,
            usage=usage,
            active_seconds=active_seconds,
            list_cost_usd=list_cost_usd,
            fence=fence,
        )
        row = (
            SessionThread.objects.select_for_update().only("usage", "active_seconds", "list_cost_usd").get(pk=thread.pk)
        )
        row.usage = log.summed_usage(row.usage or {}, usage)
        row.active_seconds += active_seconds
        row.list_cost_usd += list_cost_usd
        row.save(update_fields=["usage", "active_seconds", "list_cost_usd", "updated_at"])


# -- the API's writes ------------------------------------------------------------------------------------
def archive(thread: SessionThread) -> SessionThread:
    """Archive a child thread: it is terminated (its log takes no more events; a turn of it running stops at
    its next checkpoint)."""
    with transaction.atomic():
        row = SessionThread.objects.select_for_update().get(pk=thread.pk)
        if row.archived_at is None:
            row.archived_at = timezone.now()
            row.save(update_fields=["archived_at", "updated_at"])
    if row.status != Status.TERMINATED:
        transition(thread=row, status=Status.TERMINATED, fence=None)
        row.refresh_from_db()
    notify.wake_runtime(thread.session_id)
    return row


def terminate_all(session: Session) -> None:
    """The session is terminating (its row locked): each of its live threads terminates, in its own log and
    the primary thread's."""
    for thread in SessionThread.objects.filter(session_id=session.pk).exclude(status=Status.TERMINATED):
        _transition_locked(session, thread, Status.TERMINATED)
