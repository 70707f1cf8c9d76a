"""The session log: the only code that writes a session's events, status, lease and usage.

One function per operation: `claim`, `renew`, `release` (the lease); `append` (user events),
`acknowledge`, `emit`, `transition` (the log and the lifecycle); `add_usage`, `record_evaluation`.
A status change also writes its webhook events (`STATUS_WEBHOOKS`) into the outbox, in its transaction;
nothing else the log writes has one.
Every write by a runtime worker carries its `Fence` and is refused (`LeaseLost`) in its own transaction
once another worker holds the session or it is terminated; the public API writes without one.

Where PostgreSQL takes an operation in one statement, that statement and the locking-read version the
other databases (SQLite) run stand side by side inside the operation's function and share its
validation and its fence check (`_check_fence`). Every visible event gets the next `seq` under the
session row's lock, so `seq` is gap-free in commit order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import Any, NoReturn

import orjson
from django.db import connection, transaction
from django.db.models import Case, F, Q, QuerySet, Value, When
from django.utils import timezone

from registry.core.errors import invalid_request, not_found
from registry.core.ids import new_id
from registry.sessions import notify, work
from registry.sessions.models import Session, SessionEvent, WorkItem
from registry.webhooks import outbox
from registry.webhooks.models import WebhookEvent

# What the model thought, kept on `agent.thinking` for the admin's transcript: {"type": "thinking", "text": …}, or
# {"type": "redacted_thinking"} when the provider returned it encrypted. The API never renders it.
THINKING_FIELD = "_thinking"

Status = Session.Status
SESSIONS = Session._meta.db_table
EVENTS = SessionEvent._meta.db_table
WORK = WorkItem._meta.db_table
WEBHOOK_EVENTS = WebhookEvent._meta.db_table
ZERO = Decimal(0)
EMPTY_USAGE = {
    "input_tokens": 0,
    "output_tokens": 0,
    "cache_read_input_tokens": 0,
    "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
}

# The one lifecycle table: `terminated` is final, everything else may end in it.
TRANSITIONS: dict[str, frozenset[str]] = {
    Status.IDLE: frozenset({Status.RUNNING, Status.TERMINATED}),
    Status.RUNNING: frozenset({Status.IDLE, Status.RESCHEDULING, Status.TERMINATED}),
    Status.RESCHEDULING: frozenset({Status.RUNNING, Status.IDLE, Status.TERMINATED}),
    Status.TERMINATED: frozenset(),
}
STATUS_EVENTS = {
    Status.RUNNING: "session.status_running",
    Status.RESCHEDULING: "session.status_rescheduled",
    Status.IDLE: "session.status_idle",
    Status.TERMINATED: "session.status_terminated",
}
ORPHANED = (Status.RUNNING, Status.RESCHEDULING)
# The webhook events of a move to each status: the reference client types two families, a subscriber picks
# one; an idle session's stop reason may add one more.
STATUS_WEBHOOKS = {
    Status.RUNNING: ("session.status_run_started", "session.running"),
    Status.RESCHEDULING: ("session.status_rescheduled", "session.pending"),
    Status.IDLE: ("session.status_idled", "session.idled"),
    Status.TERMINATED: ("session.status_terminated",),
}
STOP_REASON_WEBHOOKS = {"requires_action": "session.requires_action", "budget_reached": "session.budget_reached"}


class LeaseLost(Exception):
    """The writer no longer holds the session: another worker took it over, or it was terminated or deleted."""


class SessionTerminated(LeaseLost):
    """The session ended under the writer (archived, terminated or deleted), or a transition was asked of a
    terminated session: `terminated` is final."""


@dataclass(frozen=True)
class Fence:
    """A runtime worker's claim on a session: its owner id and the token the claim was given."""

    session_id: str
    owner: str
    token: int


@dataclass(frozen=True)
class Claim:
    """A session a worker just leased: its fence and how many times its turn has been claimed."""

    fence: Fence
    attempts: int


# -- the fence, shared by every operation ---------------------------------------------------------
def _check_fence(session_id: str, found: Session | None, fence: Fence | None) -> None:
    """Raise `LeaseLost` when the session is gone, or the fence no longer holds it."""
    if found is None:
        raise SessionTerminated(f"session {session_id} was deleted")
    if fence is not None and found.status == Status.TERMINATED:
        raise SessionTerminated(f"session {session_id} was archived or terminated")
    if fence is not None and (found.lease_owner != fence.owner or found.lease_token != fence.token):
        raise LeaseLost(f"session {session_id} is no longer held by {fence.owner} (token {fence.token})")


def locked(session_id: str, fence: Fence | None) -> Session:
    """Lock the session row (the caller is in a transaction); a fenced write is refused unless its fence
    still holds the session. The threads' log (`thread_log`) takes it first too."""
    rows = Session.objects.select_for_update().only("last_seq", "status", "lease_owner", "lease_token", "workspace_id")
    found = rows.filter(pk=session_id).first()
    _check_fence(session_id, found, fence)
    assert found is not None
    return found


def _refused(session_id: str, fence: Fence | None) -> NoReturn:
    """A one-statement write found no row to take: name what happened (gone, taken over, terminated)."""
    found = Session.objects.only("status", "lease_owner", "lease_token").filter(pk=session_id).first()
    _check_fence(session_id, found, fence)
    raise LeaseLost(f"session {session_id} refused the write")


def _fence_parameters(session_id: str, fence: Fence | None) -> dict[str, Any]:
    """The parameters a one-statement write checks a fence with (no fence: any holder)."""
    return {
        "session": session_id,
        "unfenced": fence is None,
        "owner": fence.owner if fence else None,
        "token": fence.token if fence else None,
        "terminated": Status.TERMINATED,
    }


# The fence as a SQL condition on the session row, for the one-statement writes.
FENCED = "(%(unfenced)s OR (lease_owner = %(owner)s AND lease_token = %(token)s AND status <> %(terminated)s))"


def _one_row(statement: str, parameters: dict[str, Any] | list[Any]) -> tuple[Any, ...] | None:
    with connection.cursor() as cursor:
        cursor.execute(statement, parameters)
        return cursor.fetchone()  # type: ignore[no-any-return]


def _one_statement() -> bool:
    return connection.vendor == "postgresql"


# -- the lease ------------------------------------------------------------------------------------
def with_work() -> Q:
    """Sessions the runtime should run: pending user events, or a running turn whose lease ran out."""
    lease_free = Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=timezone.now())
    orphaned_turn = Q(status__in=ORPHANED)
    return (Q(has_pending_events=True) | orphaned_turn) & lease_free & ~Q(status=Status.TERMINATED)


def _candidates(limit: int) -> QuerySet[Session]:
    return Session.objects.filter(with_work()).order_by("updated_at")[:limit]


# The oldest sessions with work that no other worker is claiming right now (SKIP LOCKED), each given
# this owner, an expiry and the next fencing token.
CLAIM_STATEMENT = f"""
UPDATE {SESSIONS} SET lease_owner = %s, lease_expires_at = %s, lease_token = lease_token + 1,
    turn_attempts = CASE WHEN status = ANY(%s) THEN turn_attempts + 1 ELSE 1 END
WHERE id IN ({{candidates}} FOR UPDATE SKIP LOCKED)
RETURNING id, lease_token, turn_attempts
"""


def claim(*, owner: str, seconds: float, limit: int) -> list[Claim]:
    """Lease up to `limit` sessions that have waited longest for work, raising each one's fencing token.

    PostgreSQL claims in one statement that skips rows another worker is claiming, so workers never
    wait on each other; SQLite serializes writers, and the conditional update makes a claim exclusive.
    """
    if limit <= 0:
        return []
    expires = timezone.now() + timedelta(seconds=seconds)
    if _one_statement():
        candidates, parameters = _candidates(limit).values("pk").query.sql_with_params()
        with connection.cursor() as cursor:
            cursor.execute(CLAIM_STATEMENT.format(candidates=candidates), [owner, expires, list(ORPHANED), *parameters])
            claimed = list(cursor.fetchall())
    else:
        with transaction.atomic():
            ids = list(_candidates(limit).values_list("pk", flat=True))
            Session.objects.filter(with_work(), pk__in=ids).update(
                lease_owner=owner,
                lease_expires_at=expires,
                lease_token=F("lease_token") + 1,
                turn_attempts=Case(When(status__in=ORPHANED, then=F("turn_attempts") + 1), default=Value(1)),
            )
            mine = Session.objects.filter(pk__in=ids, lease_owner=owner)
            claimed = list(mine.values_list("pk", "lease_token", "turn_attempts"))
    return [Claim(Fence(session_id, owner, token), attempts) for session_id, token, attempts in claimed]


def renew(*, owner: str, fences: list[Fence], seconds: float) -> set[str]:
    """Extend every lease of `fences` in one statement; returns the sessions still held (the others are lost)."""
    if not fences:
        return set()
    held = Q()
    for fence in fences:
        held |= Q(pk=fence.session_id, lease_token=fence.token)
    expires = timezone.now() + timedelta(seconds=seconds)
    with transaction.atomic():
        Session.objects.filter(held, lease_owner=owner).exclude(status=Status.TERMINATED).update(
            lease_expires_at=expires
        )
        kept = Session.objects.filter(held, lease_owner=owner, lease_expires_at=expires).values_list("pk", flat=True)
        return set(kept)


def release(fence: Fence, *, keep_attempt: bool = True) -> None:
    """Give the session back; a turn left for another worker on shutdown does not count as an attempt."""
    fields: dict[str, Any] = {"lease_owner": None, "lease_expires_at": None}
    if not keep_attempt:
        fields["turn_attempts"] = Case(When(turn_attempts__gt=0, then=F("turn_attempts") - 1), default=Value(0))
    Session.objects.filter(pk=fence.session_id, lease_owner=fence.owner, lease_token=fence.token).update(**fields)


# -- user events ----------------------------------------------------------------------------------
# Mark the session (its row lock orders the append with acknowledgments and archives), insert the
# events, tell the runtime workers; nothing happens when the session is not there or is terminated.
APPEND_STATEMENT = f"""
WITH touched AS (
    UPDATE {SESSIONS} SET has_pending_events = true, updated_at = %(now)s
    WHERE id = %(session)s AND workspace_id = COALESCE(%(workspace)s, workspace_id) AND status <> %(terminated)s
    RETURNING id, workspace_id, environment_id
), added AS (
    INSERT INTO {EVENTS} (id, session_id, type, body, created_at)
    SELECT event.id, touched.id, event.type, event.body, event.created_at
    FROM touched CROSS JOIN jsonb_to_recordset(%(events)s::jsonb)
        AS event(id text, type text, body jsonb, created_at timestamptz)
), requeued AS (
    INSERT INTO {WORK} (id, workspace_id, environment_id, session_ref, state, metadata, created_at, ttl_seconds)
    SELECT %(work)s, touched.workspace_id, touched.environment_id, touched.id, 'queued', '{{}}'::jsonb, %(now)s, 0
    FROM touched
    WHERE (
        SELECT item.state FROM {WORK} item WHERE item.session_ref = touched.id ORDER BY item.created_at DESC LIMIT 1
    ) IN ('stopping', 'stopped')
    ON CONFLICT (session_ref) WHERE state IN ('queued', 'starting', 'active') DO NOTHING
    RETURNING environment_id
)
SELECT pg_notify(%(channel)s, id), (SELECT count(pg_notify(%(work_channel)s, environment_id)) FROM requeued)
FROM touched
"""
# What the checked append reads of the session: the agent snapshot and resources are large and not needed.
CHECKED_FIELDS = ("id", "status", "workspace_id", "environment_id", "harness")


def append(
    *,
    session_id: str,
    workspace_id: str | None,
    events: list[SessionEvent],
    check: Callable[[Session], None] | None = None,
) -> None:
    """Store user events, all or none, pending until a worker acknowledges them; wake the runtime.

    With a `workspace_id` the write is also the tenancy check. `check` (rules that read the log: what a
    confirmation or a tool result may answer) runs under the session's lock; without one, PostgreSQL
    appends in one statement, and an append that statement does not take (an unknown or terminated
    session) goes the locked way, which raises the error.
    """
    if check is None and _one_statement() and _append_in_one_statement(session_id, workspace_id, events):
        notify.wake_local_runtime(session_id)
        return
    with transaction.atomic():
        rows = Session.objects.select_for_update().only(*CHECKED_FIELDS).filter(pk=session_id)
        locked = rows.filter(workspace_id=workspace_id).first() if workspace_id is not None else rows.first()
        if locked is None:
            raise not_found(f"Session {session_id} not found.")
        if locked.status == Status.TERMINATED:
            raise invalid_request("session_terminated: this session is terminated and accepts no more events.")
        if check is not None:
            check(locked)
        SessionEvent.objects.bulk_create(events)
        Session.objects.filter(pk=session_id).update(has_pending_events=True, updated_at=timezone.now())
        notify.wake_runtime(session_id)
        work.work_requeue_if_dormant(session=locked)


def _append_in_one_statement(session_id: str, workspace_id: str | None, events: list[SessionEvent]) -> bool:
    rows = [
        {"id": event.id, "type": event.type, "body": event.body, "created_at": event.created_at.isoformat()}
        for event in events
    ]
    parameters = {
        "now": timezone.now(),
        "session": session_id,
        "workspace": workspace_id,
        "terminated": Status.TERMINATED,
        "events": orjson.dumps(rows).decode(),
        "channel": notify.RUNTIME_CHANNEL,
        "work": new_id("work"),
        "work_channel": work.WORK_CHANNEL,
    }
    return _one_row(APPEND_STATEMENT, parameters) is not None


# Lock the fenced session row, number the pending events among `ids` after its `last_seq` in append
# order, and move `last_seq` and `has_pending_events` along; no row when the fence is refused.
ACKNOWLEDGE_STATEMENT = f"""
WITH fenced AS (
    SELECT id, last_seq FROM {SESSIONS} WHERE id = %(session)s AND {FENCED} FOR UPDATE
), pending AS (
    SELECT event.id, fenced.last_seq + row_number() OVER (ORDER BY event.created_at, event.id) AS seq
    FROM {EVENTS} event JOIN fenced ON event.session_id = fenced.id
    WHERE event.seq IS NULL AND event.id = ANY(%(ids)s)
), numbered AS (
    UPDATE {EVENTS} event SET seq = pending.seq, processed_at = %(now)s
    FROM pending WHERE event.id = pending.id
), moved AS (
    UPDATE {SESSIONS} session
    SET last_seq = fenced.last_seq + (SELECT count(*) FROM pending), updated_at = %(now)s,
        has_pending_events = EXISTS (
            SELECT 1 FROM {EVENTS} event
            WHERE event.session_id = fenced.id AND event.seq IS NULL AND event.id NOT IN (SELECT id FROM pending)
        )
    FROM fenced WHERE session.id = fenced.id
)
SELECT (SELECT count(*) FROM pending) FROM fenced
"""


def acknowledge(*, session_id: str, event_ids: list[str], fence: Fence | None = None) -> int:
    """Make pending user events visible: each gets `processed_at` and the next `seq`, in append order.
    Returns how many were still pending."""
    now = timezone.now()
    if _one_statement():
        row = _one_row(ACKNOWLEDGE_STATEMENT, {**_fence_parameters(session_id, fence), "ids": event_ids, "now": now})
        if row is None:
            _refused(session_id, fence)
        acknowledged = int(row[0])
    else:
        with transaction.atomic():
            seq = locked(session_id, fence).last_seq + 1
            pending = SessionEvent.objects.filter(session_id=session_id, pk__in=event_ids, seq__isnull=True)
            numbered = list(pending.order_by("created_at", "id"))
            for offset, event in enumerate(numbered):
                event.seq, event.processed_at = seq + offset, now
            SessionEvent.objects.bulk_update(numbered, ["seq", "processed_at"])
            remaining = SessionEvent.objects.filter(session_id=session_id, seq__isnull=True).exists()
            Session.objects.filter(pk=session_id).update(
                last_seq=seq - 1 + len(numbered), has_pending_events=remaining, updated_at=now
            )
            acknowledged = len(numbered)
    notify.wake_after_commit(session_id)
    return acknowledged


# -- visible events and the lifecycle ---------------------------------------------------------------
# Take the next `seq` on the fenced session row (its lock orders the log) and insert the event with it;
# with a `status`, also move the session to it, only from one of `sources` (a status event). `relaxed`
# makes this transaction's commit skip the WAL flush when asked (`set_config` is local to it).
EMIT_TEMPLATE = f"""
WITH relaxed AS (
    SELECT CASE WHEN %(flush)s THEN NULL ELSE set_config('synchronous_commit', 'off', true) END
), fenced AS (
    UPDATE {SESSIONS} SET last_seq = last_seq + 1, updated_at = %(now)s,
        status = COALESCE(%(status)s, status),
        stop_reason = CASE WHEN %(status)s IS NULL THEN stop_reason ELSE %(stop_reason)s::jsonb END,
        turn_attempts = CASE WHEN %(status)s = %(idle)s THEN 0 ELSE turn_attempts END
    WHERE id = %(session)s AND (%(sources)s::text[] IS NULL OR status = ANY(%(sources)s::text[])) AND {FENCED}
    RETURNING id, workspace_id, last_seq
){{webhooks}}
INSERT INTO {EVENTS} (id, session_id, seq, type, body, created_at, processed_at)
SELECT %(id)s, fenced.id, fenced.last_seq, %(type)s, %(body)s::jsonb, %(now)s, %(now)s FROM fenced, relaxed
RETURNING seq
"""
# A status change's webhook events into the outbox in the same statement (`webhooks`: each one's id, type and
# data, from `outbox.event_data`), given the session's workspace, which the caller does not know.
WEBHOOKS_INSERT = f"""
, webhooks AS (
    INSERT INTO {WEBHOOK_EVENTS} (id, workspace_id, type, data, created_at)
    SELECT hook.id, fenced.workspace_id, hook.type,
        hook.data || jsonb_build_object('workspace_id', fenced.workspace_id), %(now)s
    FROM fenced CROSS JOIN jsonb_to_recordset(%(webhooks)s::jsonb) AS hook(id text, type text, data jsonb)
)"""
EMIT_STATEMENT = EMIT_TEMPLATE.format(webhooks="")
TRANSITION_STATEMENT = EMIT_TEMPLATE.format(webhooks=WEBHOOKS_INSERT)


def emit(
    *,
    session_id: str,
    type: str,
    body: dict[str, Any],
    event_id: str | None = None,
    fence: Fence | None = None,
    flush: bool = True,
) -> SessionEvent:
    """Append a visible event produced by the session (`agent.*`, `session.*`, `span.*`).

    `flush=False` (PostgreSQL) commits without waiting for the WAL flush: for markers whose loss in a
    crash costs nothing (the span opening a model call). The next ordinary commit flushes it too, so
    the log never has a gap: a crash can only lose the tail that this event ends.
    """
    event = _visible_event(session_id, type, body, event_id)
    if _one_statement():
        if not _emit_in_one_statement(event, fence, flush=flush):
            _refused(session_id, fence)
    else:
        with transaction.atomic():
            insert_locked(event, locked(session_id, fence))
    notify.wake_after_commit(session_id)
    return event


def transition(
    *,
    session_id: str,
    status: str,
    stop_reason: dict[str, Any] | None = None,
    stop_details: dict[str, Any] | None = None,
    fence: Fence | None = None,
) -> SessionEvent | None:
    """Move along the lifecycle table and emit the `session.status_*` event in the same transaction.

    Under the session row's lock, so an archive and a running turn's last write are ordered: once
    terminated, every later transition raises `SessionTerminated`. A move to the current status is a
    no-op (None). On PostgreSQL a move the table allows (other than to `terminated`) is one statement;
    what that statement does not take goes the locked way, which decides and raises. A `refusal` stop
    reason's event carries `stop_details`.
    """
    stop_reason = stop_reason if status == Status.IDLE else None
    body: dict[str, Any] = {"stop_reason": stop_reason} if status == Status.IDLE else {}
    if status == Status.IDLE and stop_reason is not None and stop_reason["type"] == "refusal":
        body["stop_details"] = stop_details  # the reference client's refusal details, or null
    event = _visible_event(session_id, STATUS_EVENTS[Status(status)], body, None)
    webhooks = status_webhooks(status, stop_reason)
    if (
        _one_statement()
        and status != Status.TERMINATED
        and _emit_in_one_statement(event, fence, status=status, stop_reason=stop_reason, webhooks=webhooks)
    ):
        notify.wake_after_commit(session_id)
        return event
    with transaction.atomic():
        row = locked(session_id, fence)
        if row.status == Status.TERMINATED:
            raise SessionTerminated(f"session {session_id} is terminated")
        if status == row.status:
            return None
        if status not in TRANSITIONS[row.status]:
            raise ValueError(f"session {session_id}: no transition from {row.status} to {status}")
        fields: dict[str, Any] = {"status": status, "stop_reason": stop_reason}
        if status == Status.TERMINATED:
            fields.update(lease_owner=None, lease_expires_at=None)
            notify.wake_runtime(session_id)
            work.work_stop_for_session(session_id=session_id)  # a self-hosted worker is told to stop
        if status == Status.IDLE:
            fields["turn_attempts"] = 0
        if status == Status.TERMINATED:
            from registry.sessions import thread_log

            thread_log.terminate_all(row)  # its threads end with it, each saying so, before its own terminal event
        Session.objects.filter(pk=session_id).update(**fields)
        insert_locked(event, row)
        for webhook in webhooks:
            outbox.emit(webhook, workspace_id=row.workspace_id, object_id=session_id)
    notify.wake_after_commit(session_id)
    return event


def status_webhooks(status: str, stop_reason: dict[str, Any] | None) -> tuple[str, ...]:
    """The webhook events of a move to `status` (with `stop_reason`, when it is `idle`)."""
    stopped = STOP_REASON_WEBHOOKS.get((stop_reason or {}).get("type", ""))
    return STATUS_WEBHOOKS[Status(status)] + ((stopped,) if stopped else ())


def _visible_event(session_id: str, type: str, body: dict[str, Any], event_id: str | None) -> SessionEvent:
    now = timezone.now()
    event = SessionEvent(session_id=session_id, type=type, body=body, processed_at=now, created_at=now)
    if event_id:
        event.id = event_id
    return event


def insert_locked(event: SessionEvent, session: Session) -> None:
    """The event with the next `seq` of the session whose row the caller has locked."""
    event.seq = session.last_seq + 1
    event.save(force_insert=True)
    Session.objects.filter(pk=event.session_id).update(last_seq=event.seq, updated_at=event.processed_at)
    session.last_seq = event.seq


def _emit_in_one_statement(
    event: SessionEvent,
    fence: Fence | None,
    *,
    flush: bool = True,
    status: str | None = None,
    stop_reason: dict[str, Any] | None = None,
    webhooks: tuple[str, ...] = (),
) -> bool:
    """The event (and the move to `status`, with its `webhooks` events) in one round trip, its own transaction
    outside an atomic block; False when the session did not take it (gone, fenced out, or not in a status it
    may leave)."""
    sources = sorted(source for source, targets in TRANSITIONS.items() if status in targets) if status else None
    parameters = {
        **_fence_parameters(event.session_id, fence),
        "flush": flush,
        "now": event.processed_at,
        "status": status,
        "stop_reason": orjson.dumps(stop_reason).decode() if stop_reason is not None else None,
        "idle": Status.IDLE,
        "sources": sources,
        "id": event.id,
        "type": event.type,
        "body": orjson.dumps(event.body).decode(),
    }
    if webhooks:
        parameters["webhooks"] = _webhook_rows(event.session_id, webhooks)
    row = _one_row(TRANSITION_STATEMENT if webhooks else EMIT_STATEMENT, parameters)
    if row is not None:
        event.seq = row[0]
    return row is not None


def _webhook_rows(session_id: str, webhooks: tuple[str, ...]) -> str:
    """The outbox rows `WEBHOOKS_INSERT` takes, as JSON; the statement fills in the session's workspace."""
    rows = [
        {
            "id": new_id(outbox.EVENT_ID_PREFIX),
            "type": webhook,
            "data": outbox.event_data(webhook, workspace_id="", object_id=session_id),
        }
        for webhook in webhooks
    ]
    return orjson.dumps(rows).decode()


# -- what a session has used and how its outcomes stand -----------------------------------------------
def summed_usage(totals: dict[str, Any], usage: dict[str, int]) -> dict[str, Any]:
    """Usage totals with a model call's usage (the provider's shape) added."""
    totals = {**EMPTY_USAGE, **totals}
    for key in ("input_tokens", "output_tokens", "cache_read_input_tokens"):
        totals[key] = totals.get(key, 0) + int(usage.get(key) or 0)
    creation = dict(totals.get("cache_creation") or {})
    written = int(usage.get("cache_creation_input_tokens") or 0)
    creation["ephemeral_5m_input_tokens"] = creation.get("ephemeral_5m_input_tokens", 0) + written
    totals["cache_creation"] = creation
    return totals


@transaction.atomic
def add_usage(
    *,
    session_id: str,
    usage: dict[str, int],
    active_seconds: float = 0.0,
    list_cost_usd: Decimal = ZERO,
    fence: Fence | None = None,
) -> None:
    """Accumulate a model call's token usage and list cost, and the turn's active time."""
    locked(session_id, fence)
    session = Session.objects.only("usage", "active_seconds", "list_cost_usd", "updated_at").get(pk=session_id)
    session.usage = summed_usage(session.usage, usage)
    session.active_seconds += active_seconds
    session.list_cost_usd += list_cost_usd
    session.save(update_fields=["usage", "active_seconds", "list_cost_usd", "updated_at"])


@transaction.atomic
def record_evaluation(*, session_id: str, evaluation: dict[str, Any], fence: Fence | None = None) -> None:
    """Set an outcome's evaluation: one entry per outcome, holding its latest state."""
    locked(session_id, fence)
    session = Session.objects.only("outcome_evaluations", "updated_at").get(pk=session_id)
    kept = [item for item in session.outcome_evaluations if item.get("outcome_id") != evaluation["outcome_id"]]
    session.outcome_evaluations = [*kept, evaluation]
    session.save(update_fields=["outcome_evaluations", "updated_at"])
