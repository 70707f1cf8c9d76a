"""Writes for sessions and their event log.

Public API writes: create, update, archive (terminates), delete, append user events.
Runtime writes: acknowledge user events, emit events, change status, add usage and evaluations.
Every visible event gets the next `seq` under a lock on the session row.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any, NoReturn

import orjson
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from registry.agents.selectors import usable_agent
from registry.core import tracing
from registry.core.errors import conflict, invalid_request, not_found
from registry.core.ids import new_id
from registry.core.selectors import require_live
from registry.core.services import apply_updates
from registry.environments.selectors import usable_environment
from registry.extensions.selectors import list_price
from registry.sessions import notify, resources
from registry.sessions.events import MAX_ITERATIONS_DEFAULT, NATIVE_BETA_FIELD
from registry.sessions.models import Session, SessionEvent
from registry.vaults.models import Vault
from registry.workspaces.models import Workspace

ZERO = Decimal(0)
EMPTY_USAGE = {
    "input_tokens": 0,
    "output_tokens": 0,
    "cache_read_input_tokens": 0,
    "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
}


# -- creating a session -------------------------------------------------------------------------
def _check_references(workspace: Workspace, values: dict[str, Any]) -> None:
    """Vaults a session names must be live vaults of its workspace."""
    require_live(Vault, workspace=workspace, ids=list(values.get("vault_ids") or []), field="vault_ids", noun="vault")


BUDGET_PROVIDER = "vendor_b"  # the runtime speaks the messages shape


def _check_budgetable(spec: dict[str, Any]) -> None:
    """A budget needs a list price for the session's model (pricing group, provider `vendor_b`)."""
    model = spec["model"]["id"]
    if list_price(provider=BUDGET_PROVIDER, model=model) is None:
        raise invalid_request(
            f"budget: model_not_budgetable: model {model} has no list price, so no budget can measure it."
        )


@transaction.atomic
def session_create(*, workspace: Workspace, values: dict[str, Any]) -> Session:
    agent, pinned, spec = usable_agent(workspace_id=workspace.pk, reference=values["agent"])
    version = pinned or agent.version
    environment = usable_environment(workspace_id=workspace.pk, environment_id=values["environment_id"])
    _check_references(workspace, values)
    if values.get("budget"):
        _check_budgetable(spec)
    records = resources.build_records(workspace, list(values.get("resources") or []), [])
    session = Session.objects.create(
        workspace=workspace,
        agent=agent,
        agent_version=version,
        agent_snapshot=spec,
        environment=environment,
        harness=values.get("harness") or {"type": "default"},
        title=values.get("title"),
        metadata=values.get("metadata", {}),
        vault_ids=list(values.get("vault_ids") or []),
        resources=records,
        usage=EMPTY_USAGE,
        budget=values.get("budget"),
    )
    initial_events = values.get("initial_events") or []
    if initial_events:
        events_append(session=session, events=initial_events)
    return session


@transaction.atomic
def session_update(*, session: Session, values: dict[str, Any]) -> Session:
    locked = Session.objects.select_for_update().get(pk=session.pk)
    apply_updates(locked, values, ("title",))
    if "budget" in values:
        _update_budget(locked, values["budget"])
    locked.save(update_fields=["title", "metadata", "budget", "updated_at"])
    return locked


def _update_budget(session: Session, budget: dict[str, Any] | None) -> None:
    """Replace or remove a budget, by the reference client's rules."""
    if session.status == Session.Status.TERMINATED:
        raise conflict("session_terminated: a terminated session's budget cannot change.")
    if budget is not None and session.budget is None:
        raise invalid_request("budget: budget_create_only: a budget can only be set on a session created with one.")
    if budget is not None:
        if Decimal(budget["max_list_cost"]["amount"]) / 100 <= session.list_cost_usd:
            raise invalid_request(
                "budget: budget_not_raised: max_list_cost must exceed the list cost already consumed."
            )
        _check_budgetable(session.agent_snapshot)
    session.budget = budget


@transaction.atomic
def session_archive(*, session: Session) -> Session:
    """Archive and terminate: the runtime stops the session's work; its streams end."""
    locked = Session.objects.select_for_update().get(pk=session.pk)
    if locked.archived_at is None:
        locked.archived_at = timezone.now()
        locked.save(update_fields=["archived_at", "updated_at"])
    if locked.status != Session.Status.TERMINATED:
        session_transition(session_id=locked.pk, status=Session.Status.TERMINATED)
        locked.refresh_from_db()
    return locked


@transaction.atomic
def session_delete(*, session: Session) -> None:
    Session.objects.filter(pk=session.pk).delete()
    notify.wake_after_commit(session.pk)
    notify.wake_runtime(session.pk)


# -- user events ----------------------------------------------------------------------------------
def _pending_confirmations(session: Session) -> set[str]:
    """Tool calls paused by an `always_ask` policy that no confirmation has answered yet."""
    asked = set(
        SessionEvent.objects.filter(
            session=session, type__in=("agent.mcp_tool_use", "agent.tool_use"), body__evaluated_permission="ask"
        ).values_list("id", flat=True)
    )
    answered = set(
        SessionEvent.objects.filter(session=session, type="user.tool_confirmation").values_list(
            "body__tool_use_id", flat=True
        )
    )
    return asked - answered


def _open_custom_tool_uses(session: Session) -> set[str]:
    used = set(SessionEvent.objects.filter(session=session, type="agent.custom_tool_use").values_list("id", flat=True))
    answered = set(
        SessionEvent.objects.filter(session=session, type="user.custom_tool_result").values_list(
            "body__custom_tool_use_id", flat=True
        )
    )
    return used - answered


def _check_event(session: Session, index: int, event: dict[str, Any], state: dict[str, set[str]]) -> None:
    """Rules that depend on the session: what a confirmation or a tool result may answer."""
    kind = event["type"]
    where = f"events[{index}]"
    if kind == "user.tool_confirmation":
        if event["tool_use_id"] not in state["confirmations"]:
            raise invalid_request(f"{where}.tool_use_id: no tool call awaiting confirmation has this id.")
        state["confirmations"].discard(event["tool_use_id"])
    elif kind == "user.custom_tool_result":
        if event["custom_tool_use_id"] not in state["custom_tool_uses"]:
            raise invalid_request(f"{where}.custom_tool_use_id: no unanswered agent.custom_tool_use has this id.")
        state["custom_tool_uses"].discard(event["custom_tool_use_id"])
    elif kind == "user.tool_result":
        harness = session.harness
        separate = harness.get("type") == "agent_sdk_harness" and harness.get("mode") == "separate"
        if not (separate and session.environment.config.get("type") == "self_hosted"):
            raise invalid_request(
                f"{where}: user.tool_result needs the agent_sdk_harness in separate mode on a self_hosted environment."
            )


def _stored_body(event: dict[str, Any], native: bool) -> dict[str, Any]:
    body = {key: value for key, value in event.items() if key != "type"}
    if native:
        body[NATIVE_BETA_FIELD] = True
    if event["type"] == "user.define_outcome":
        body["outcome_id"] = new_id("outc")
        body["max_iterations"] = body.get("max_iterations") or MAX_ITERATIONS_DEFAULT
    return body


# Kinds whose acceptance no session state decides (what a confirmation or a tool result may answer
# depends on the log; these depend only on the session being there and not terminated).
UNCONDITIONAL_KINDS = frozenset({"user.message", "user.interrupt", "user.define_outcome"})


def events_append(
    *,
    session: Session | None = None,
    session_id: str | None = None,
    workspace_id: str | None = None,
    events: Iterable[dict[str, Any]],
    native: bool = False,
) -> list[SessionEvent]:
    """Append user events, all or none. They become visible once the runtime acknowledges them.

    The API passes `session_id` and `workspace_id`: the write is also the tenancy check. On PostgreSQL a
    batch of unconditional kinds is one statement (`_append_in_one_statement`); any other batch, and
    one that statement did not take (an unknown or terminated session), goes the checked way, which
    raises the errors.
    """
    events = list(events)
    target = session.pk if session else session_id
    assert target is not None
    created = _new_events(target, events, native)
    lean = connection.vendor == "postgresql" and {event["type"] for event in events} <= UNCONDITIONAL_KINDS
    if lean and _append_in_one_statement(target, workspace_id, created):
        return created
    return _append_checked(target, workspace_id, events, created)


def _new_events(session_id: str, events: list[dict[str, Any]], native: bool) -> list[SessionEvent]:
    """The rows to store, each stamped as `auto_now_add` would, carrying the request's trace context."""
    traceparent = tracing.current_traceparent()  # the appending request's span: the turn continues it
    created = []
    for event in events:
        body = _stored_body(event, native)
        if traceparent:
            body[tracing.TRACEPARENT_FIELD] = traceparent
        created.append(SessionEvent(session_id=session_id, type=event["type"], body=body, created_at=timezone.now()))
    return created


# Mark the session (its row lock orders the append with acknowledgments and archives), insert the
# events, tell the runtime workers; nothing happens when the session is not there or is terminated.
APPEND_STATEMENT = f"""
WITH touched AS (
    UPDATE {Session._meta.db_table} SET has_pending_events = true, updated_at = %(now)s
    WHERE id = %(session)s AND workspace_id = COALESCE(%(workspace)s, workspace_id) AND status <> %(terminated)s
    RETURNING id
), added AS (
    INSERT INTO {SessionEvent._meta.db_table} (id, session_id, type, body, created_at)
    SELECT event.id, touched.id, event.type, event.body, event.created_at
    FROM touched CROSS JOIN jsonb_to_recordset(%(events)s::jsonb)
        AS event(id text, type text, body jsonb, created_at timestamptz)
)
SELECT pg_notify(%(channel)s, id) FROM touched
"""


def _append_in_one_statement(session_id: str, workspace_id: str | None, created: list[SessionEvent]) -> bool:
    """The append in one round trip (its own transaction outside an atomic block); False if not taken."""
    rows = [
        {"id": event.id, "type": event.type, "body": event.body, "created_at": event.created_at.isoformat()}
        for event in created
    ]
    parameters: dict[str, Any] = {
        "now": timezone.now(),
        "session": session_id,
        "workspace": workspace_id,
        "terminated": Session.Status.TERMINATED,
        "events": orjson.dumps(rows).decode(),
        "channel": notify.RUNTIME_CHANNEL,
    }
    with connection.cursor() as cursor:
        cursor.execute(APPEND_STATEMENT, parameters)
        taken = cursor.fetchone() is not None
    if taken:
        notify.wake_local_runtime(session_id)
    return taken


@transaction.atomic
def _append_checked(
    session_id: str, workspace_id: str | None, events: list[dict[str, Any]], created: list[SessionEvent]
) -> list[SessionEvent]:
    """The append under a locking read of the session: every kind, every error."""
    # Only what the checks read: the agent snapshot and resources are large and not needed here.
    rows = Session.objects.select_for_update().only("id", "status", "workspace_id", "environment_id", "harness")
    rows = rows.filter(pk=session_id)
    if workspace_id is not None:
        rows = rows.filter(workspace_id=workspace_id)
    locked = rows.first()
    if locked is None:
        raise not_found(f"Session {session_id} not found.")
    if locked.status == Session.Status.TERMINATED:
        raise invalid_request("session_terminated: this session is terminated and accepts no more events.")
    kinds = {event["type"] for event in events}
    # Only batches that answer something pay for reading what is open (plain messages stay O(1)).
    state = {
        "confirmations": _pending_confirmations(locked) if "user.tool_confirmation" in kinds else set(),
        "custom_tool_uses": _open_custom_tool_uses(locked) if "user.custom_tool_result" in kinds else set(),
    }
    for index, event in enumerate(events):
        _check_event(locked, index, event, state)
    SessionEvent.objects.bulk_create(created)
    Session.objects.filter(pk=locked.pk).update(has_pending_events=True, updated_at=timezone.now())
    notify.wake_runtime(locked.pk)
    return created


# -- runtime writes -------------------------------------------------------------------------------
class LeaseLost(Exception):
    """The writer no longer holds the session: another worker took it over, or it was terminated or deleted."""


@dataclass(frozen=True)
class Fence:
    """A runtime worker's claim on a session: its owner id and the token the claim was given."""

    session_id: str
    owner: str
    token: int


def _lock_session(session_id: str, fence: Fence | None) -> Session:
    """Lock the session row; a fenced write is refused unless the fence still holds it."""
    session = Session.objects.select_for_update().only("last_seq", "status", "lease_owner", "lease_token")
    found = session.filter(pk=session_id).first()
    _check_fence(session_id, found, fence)
    assert found is not None
    return found


def _check_fence(session_id: str, found: Session | None, fence: Fence | None) -> None:
    """Raise `LeaseLost` when the session is gone, or the fence no longer holds it."""
    if found is None:
        raise LeaseLost(f"session {session_id} no longer exists")
    if fence is not None and (
        found.lease_owner != fence.owner
        or found.lease_token != fence.token
        or found.status == Session.Status.TERMINATED
    ):
        raise LeaseLost(f"session {session_id} is no longer held by {fence.owner} (token {fence.token})")


def _next_seq(session_id: str, fence: Fence | None) -> int:
    """The next sequence number; the caller holds the session row lock until commit."""
    return _lock_session(session_id, fence).last_seq + 1


def events_acknowledge(*, session_id: str, event_ids: Iterable[str], fence: Fence | None = None) -> int:
    """Mark user events processed: each gets `processed_at` and the next `seq`, in append order.
    Returns how many were still pending."""
    ids, now = list(event_ids), timezone.now()
    if connection.vendor == "postgresql":
        acknowledged = _acknowledge_in_one_statement(session_id, ids, fence, now)
    else:
        acknowledged = _acknowledge_locked(session_id, ids, fence, now)
    notify.wake_after_commit(session_id)
    return acknowledged


# Lock the fenced session row, number the pending events among `ids` after its `last_seq` in append
# order, and move `last_seq` and `has_pending_events` along; no row when the fence is refused.
ACKNOWLEDGE_STATEMENT = f"""
WITH fenced AS (
    SELECT id, last_seq FROM {Session._meta.db_table}
    WHERE id = %(session)s AND (%(unfenced)s OR (lease_owner = %(owner)s AND lease_token = %(token)s
        AND status <> %(terminated)s))
    FOR UPDATE
), pending AS (
    SELECT event.id, fenced.last_seq + row_number() OVER (ORDER BY event.created_at, event.id) AS seq
    FROM {SessionEvent._meta.db_table} event JOIN fenced ON event.session_id = fenced.id
    WHERE event.seq IS NULL AND event.id = ANY(%(ids)s)
), numbered AS (
    UPDATE {SessionEvent._meta.db_table} event SET seq = pending.seq, processed_at = %(now)s
    FROM pending WHERE event.id = pending.id
), moved AS (
    UPDATE {Session._meta.db_table} session
    SET last_seq = fenced.last_seq + (SELECT count(*) FROM pending), updated_at = %(now)s,
        has_pending_events = EXISTS (
            SELECT 1 FROM {SessionEvent._meta.db_table} event
            WHERE event.session_id = fenced.id AND event.seq IS NULL AND event.id NOT IN (SELECT id FROM pending)
        )
    FROM fenced WHERE session.id = fenced.id
)
SELECT (SELECT count(*) FROM pending) FROM fenced
"""


def _acknowledge_in_one_statement(session_id: str, ids: list[str], fence: Fence | None, now: datetime) -> int:
    parameters = {**_fence_parameters(session_id, fence), "ids": ids, "now": now}
    with connection.cursor() as cursor:
        cursor.execute(ACKNOWLEDGE_STATEMENT, parameters)
        row = cursor.fetchone()
    if row is None:
        _raise_refused(session_id, fence)
    return int(row[0])


@transaction.atomic
def _acknowledge_locked(session_id: str, ids: list[str], fence: Fence | None, now: datetime) -> int:
    """The acknowledgment under a locking read of the session (databases without one-statement writes)."""
    seq = _next_seq(session_id, fence)
    pending = list(
        SessionEvent.objects.filter(session_id=session_id, pk__in=ids, seq__isnull=True).order_by("created_at", "id")
    )
    for event in pending:
        event.seq, event.processed_at = seq, now
        seq += 1
    SessionEvent.objects.bulk_update(pending, ["seq", "processed_at"])
    remaining = SessionEvent.objects.filter(session_id=session_id, seq__isnull=True).exists()
    Session.objects.filter(pk=session_id).update(last_seq=seq - 1, has_pending_events=remaining, updated_at=now)
    return len(pending)


def _fence_parameters(session_id: str, fence: Fence | None) -> dict[str, Any]:
    """The parameters the one-statement writes check a fence with (no fence: any holder)."""
    return {
        "session": session_id,
        "unfenced": fence is None,
        "owner": fence.owner if fence else None,
        "token": fence.token if fence else None,
        "terminated": Session.Status.TERMINATED,
    }


def _raise_refused(session_id: str, fence: Fence | None) -> NoReturn:
    """A one-statement write found no row to take: name what happened (gone, taken over, terminated)."""
    found = Session.objects.only("status", "lease_owner", "lease_token").filter(pk=session_id).first()
    _check_fence(session_id, found, fence)
    raise LeaseLost(f"session {session_id} refused the write")


def event_emit(
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
    now = timezone.now()
    event = SessionEvent(session_id=session_id, type=type, body=body, processed_at=now, created_at=now)
    if event_id:
        event.id = event_id
    if connection.vendor == "postgresql":
        if not _emit_in_one_statement(event, fence, flush=flush):
            _raise_refused(session_id, fence)
    else:
        _emit_locked(event, fence)
    notify.wake_after_commit(session_id)
    return event


# Take the next `seq` on the fenced session row (its lock orders the log) and insert the event with it;
# with a `status`, also move the session to it, only from one of `sources` (a status event). `relaxed`
# makes this transaction's commit skip the WAL flush when asked (`set_config` is local to it).
EMIT_STATEMENT = f"""
WITH relaxed AS (
    SELECT CASE WHEN %(flush)s THEN NULL ELSE set_config('synchronous_commit', 'off', true) END
), fenced AS (
    UPDATE {Session._meta.db_table} SET last_seq = last_seq + 1, updated_at = %(now)s,
        status = COALESCE(%(status)s, status),
        stop_reason = CASE WHEN %(status)s IS NULL THEN stop_reason ELSE %(stop_reason)s::jsonb END,
        turn_attempts = CASE WHEN %(status)s = %(idle)s THEN 0 ELSE turn_attempts END
    WHERE id = %(session)s AND (%(sources)s::text[] IS NULL OR status = ANY(%(sources)s::text[]))
        AND (%(unfenced)s OR (lease_owner = %(owner)s AND lease_token = %(token)s AND status <> %(terminated)s))
    RETURNING id, last_seq
)
INSERT INTO {SessionEvent._meta.db_table} (id, session_id, seq, type, body, created_at, processed_at)
SELECT %(id)s, fenced.id, fenced.last_seq, %(type)s, %(body)s::jsonb, %(now)s, %(now)s FROM fenced, relaxed
RETURNING seq
"""


def _emit_in_one_statement(
    event: SessionEvent,
    fence: Fence | None,
    *,
    flush: bool = True,
    status: str | None = None,
    stop_reason: dict[str, Any] | None = None,
) -> bool:
    """The event (and the move to `status`) in one round trip, its own transaction outside an atomic
    block; False when the session did not take it (gone, fenced out, or not in a status it may leave)."""
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
    with connection.cursor() as cursor:
        cursor.execute(EMIT_STATEMENT, parameters)
        row = cursor.fetchone()
    if row is not None:
        event.seq = row[0]
    return row is not None


@transaction.atomic
def _emit_locked(event: SessionEvent, fence: Fence | None) -> None:
    """The event under a locking read of the session (databases without one-statement writes)."""
    event.seq = _next_seq(event.session_id, fence)
    event.save(force_insert=True)
    Session.objects.filter(pk=event.session_id).update(last_seq=event.seq, updated_at=event.processed_at)


STATUS_EVENTS = {
    Session.Status.RUNNING: "session.status_running",
    Session.Status.RESCHEDULING: "session.status_rescheduled",
    Session.Status.IDLE: "session.status_idle",
    Session.Status.TERMINATED: "session.status_terminated",
}
Status = Session.Status
# The one lifecycle table: `terminated` is final, everything else may end in it.
TRANSITIONS: dict[str, frozenset[str]] = {
    Status.IDLE: frozenset({Status.RUNNING, Status.TERMINATED}),
    Status.RUNNING: frozenset({Status.IDLE, Status.RESCHEDULING, Status.TERMINATED}),
    Status.RESCHEDULING: frozenset({Status.RUNNING, Status.IDLE, Status.TERMINATED}),
    Status.TERMINATED: frozenset(),
}


class SessionTerminated(LeaseLost):
    """A transition was asked of a terminated session: `terminated` is final."""


def session_transition(
    *, session_id: str, status: str, stop_reason: dict[str, Any] | None = None, fence: Fence | None = None
) -> SessionEvent | None:
    """Move along the lifecycle table and emit the `session.status_*` event in the same transaction.

    Runs under the session row lock, so an archive and a running turn's last write are ordered: once
    terminated, every later transition raises `SessionTerminated`. A move to the current status is
    a no-op (None). On PostgreSQL a move the table allows (other than to `terminated`) is one statement;
    what that statement does not take goes the locked way, which decides and raises.
    """
    stop_reason = stop_reason if status == Status.IDLE else None
    if connection.vendor == "postgresql" and status != Status.TERMINATED:
        event = _status_event(session_id, status, stop_reason)
        if _emit_in_one_statement(event, fence, status=status, stop_reason=stop_reason):
            notify.wake_after_commit(session_id)
            return event
    return _transition_locked(session_id, status, stop_reason, fence)


def _status_event(session_id: str, status: str, stop_reason: dict[str, Any] | None) -> SessionEvent:
    now = timezone.now()
    body = {"stop_reason": stop_reason} if status == Status.IDLE else {}
    event_type = STATUS_EVENTS[Session.Status(status)]
    return SessionEvent(session_id=session_id, type=event_type, body=body, processed_at=now, created_at=now)


@transaction.atomic
def _transition_locked(
    session_id: str, status: str, stop_reason: dict[str, Any] | None, fence: Fence | None
) -> SessionEvent | None:
    current = _lock_session(session_id, fence).status
    if current == Status.TERMINATED:
        raise SessionTerminated(f"session {session_id} is terminated")
    if status == current:
        return None
    if status not in TRANSITIONS[current]:
        raise ValueError(f"session {session_id}: no transition from {current} to {status}")
    fields: dict[str, Any] = {"status": status, "stop_reason": stop_reason}
    if status == Status.TERMINATED:
        fields.update(lease_owner=None, lease_expires_at=None)
        notify.wake_runtime(session_id)
    if status == Status.IDLE:
        fields["turn_attempts"] = 0
    Session.objects.filter(pk=session_id).update(**fields)
    event = _status_event(session_id, status, stop_reason)
    return event_emit(session_id=session_id, type=event.type, body=event.body, fence=fence)


@transaction.atomic
def session_add_usage(
    *,
    session_id: str,
    usage: dict[str, int],
    active_seconds: float = 0.0,
    list_cost_usd: Decimal = ZERO,
    fence: Fence | None = None,
) -> None:
    """Accumulate a model call's token usage and list cost, and the turn's active time."""
    _lock_session(session_id, fence)
    session = Session.objects.get(pk=session_id)
    totals = {**EMPTY_USAGE, **session.usage}
    for key in ("input_tokens", "output_tokens", "cache_read_input_tokens"):
        totals[key] = totals.get(key, 0) + int(usage.get(key) or 0)
    creation = dict(totals.get("cache_creation") or {})
    creation["ephemeral_5m_input_tokens"] = creation.get("ephemeral_5m_input_tokens", 0) + int(
        usage.get("cache_creation_input_tokens") or 0
    )
    totals["cache_creation"] = creation
    session.usage = totals
    session.active_seconds += active_seconds
    session.list_cost_usd += list_cost_usd
    session.save(update_fields=["usage", "active_seconds", "list_cost_usd", "updated_at"])


@transaction.atomic
def session_record_evaluation(*, session_id: str, evaluation: dict[str, Any], fence: Fence | None = None) -> None:
    """Set an outcome's evaluation: one entry per outcome, holding its latest state."""
    _lock_session(session_id, fence)
    session = Session.objects.get(pk=session_id)
    kept = [item for item in session.outcome_evaluations if item.get("outcome_id") != evaluation["outcome_id"]]
    session.outcome_evaluations = [*kept, evaluation]
    session.save(update_fields=["outcome_evaluations", "updated_at"])


def sessions_with_work() -> Q:
    """Sessions the runtime should run: pending user events, or a running turn whose lease ran out."""
    now = timezone.now()
    lease_free = Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=now)
    orphaned_turn = Q(status__in=(Session.Status.RUNNING, Session.Status.RESCHEDULING))
    return (Q(has_pending_events=True) | orphaned_turn) & lease_free & ~Q(status=Session.Status.TERMINATED)
