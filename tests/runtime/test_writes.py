"""The runtime's one-statement writes (PostgreSQL) against the locked ones they stand in for: the same
rows, the same refusals; and the worker's visible-log cache."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from registry.runtime.eventlog import VisibleLogs
from registry.runtime.lease import claim_batch
from registry.sessions import services
from registry.sessions.models import Session, SessionEvent

TEXT = [{"type": "text", "text": "hi"}]
MESSAGE = {"type": "user.message", "content": TEXT}
SESSION_FIELDS = ("status", "stop_reason", "turn_attempts", "last_seq", "has_pending_events")


def state(session_id: str) -> dict[str, Any]:
    """What a write leaves behind: the session's fields and its visible log (without ids and times)."""
    fields = Session.objects.values(*SESSION_FIELDS).get(pk=session_id)
    log = SessionEvent.objects.filter(session_id=session_id).order_by("seq", "created_at")
    return {**fields, "log": [(event.seq, event.type, event.body) for event in log]}


@pytest.fixture
def twins(api) -> tuple[str, str]:
    """Two idle sessions: one written the one-statement way, the other the locked way."""
    agent = api.post("/v1/agents", {"name": "a", "model": "m"}, format="json").json()
    environment = api.post("/v1/environments", {"name": "e"}, format="json").json()
    body = {"agent": agent["id"], "environment_id": environment["id"]}
    first, second = (api.post("/v1/sessions", body, format="json").json()["id"] for _ in range(2))
    return first, second


def test_transitions_in_one_statement_write_what_the_locked_ones_write(twins):
    lean, locked = twins
    steps: list[tuple[str, dict[str, Any] | None]] = [
        ("running", None),
        ("rescheduling", None),
        ("running", None),
        ("idle", {"type": "end_turn"}),
    ]
    for status, stop_reason in steps:
        Session.objects.filter(pk__in=twins).update(turn_attempts=2)
        with CaptureQueriesContext(connection) as queries:
            event = services.session_transition(session_id=lean, status=status, stop_reason=stop_reason)
        assert len(queries) == 1 and event is not None and event.seq is not None
        with transaction.atomic():
            services._transition_locked(locked, status, stop_reason if status == "idle" else None, None)
        assert state(lean) == state(locked)
    assert state(lean)["log"][-1] == (4, "session.status_idle", {"stop_reason": {"type": "end_turn"}})


def test_a_transition_the_statement_does_not_take_is_decided_under_the_lock(twins):
    session_id = twins[0]
    assert services.session_transition(session_id=session_id, status="idle") is None  # already idle
    with pytest.raises(ValueError):
        services.session_transition(session_id=session_id, status="rescheduling")  # not from idle
    services.session_transition(session_id=session_id, status="terminated")
    with pytest.raises(services.SessionTerminated):
        services.session_transition(session_id=session_id, status="running")
    assert state(session_id)["log"] == [(1, "session.status_terminated", {})]


def test_acknowledgments_in_one_statement_number_what_the_locked_ones_number(twins):
    for session_id in twins:
        services.events_append(session_id=session_id, events=[MESSAGE, {"type": "user.interrupt"}, MESSAGE])
        services.event_emit(session_id=session_id, type="agent.message", body={"content": TEXT})
    lean_ids, locked_ids = (
        list(SessionEvent.objects.filter(session_id=session_id, seq=None).order_by("created_at", "id"))
        for session_id in twins
    )
    now = lean_ids[0].created_at
    chosen = [2, 0, 2]  # out of order, one twice: numbered in append order, once
    with CaptureQueriesContext(connection) as queries:
        acknowledged = services.events_acknowledge(session_id=twins[0], event_ids=[lean_ids[i].id for i in chosen])
    assert len(queries) == 1 and acknowledged == 2
    with transaction.atomic():
        assert services._acknowledge_locked(twins[1], [locked_ids[i].id for i in chosen], None, now) == 2
    assert state(twins[0]) == state(twins[1])
    assert state(twins[0])["has_pending_events"]  # the interrupt is still pending
    assert [seq for seq, *_ in state(twins[0])["log"]] == [1, 2, 3, None]


def test_acknowledging_with_a_superseded_fence_is_refused(twins):
    services.events_append(session_id=twins[0], events=[MESSAGE])
    [claim] = claim_batch(owner="a", seconds=30, limit=1)
    pending = SessionEvent.objects.get(session_id=twins[0]).id
    stale = services.Fence(twins[0], "a", claim.fence.token - 1)
    with pytest.raises(services.LeaseLost):
        services.events_acknowledge(session_id=twins[0], event_ids=[pending], fence=stale)
    assert services.events_acknowledge(session_id=twins[0], event_ids=[pending], fence=claim.fence) == 1


@pytest.mark.django_db(transaction=True)  # real transactions: the setting lasts until its commit
def test_an_unflushed_event_relaxes_only_its_own_transaction(twins):
    for flush, expected in ((True, "on"), (False, "off")):
        with transaction.atomic(), connection.cursor() as cursor:
            services.event_emit(session_id=twins[0], type="span.model_request_start", body={}, flush=flush)
            cursor.execute("SHOW synchronous_commit")
            assert cursor.fetchone() == (expected,)
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        assert cursor.fetchone() == ("on",)


def test_visible_logs_read_only_what_is_new_and_keep_the_latest_sessions(twins):
    logs = VisibleLogs(sessions=1)
    first = services.event_emit(session_id=twins[0], type="agent.message", body={"content": TEXT})
    assert [event.id for event in logs.read(twins[0])] == [first.id]
    second = services.event_emit(session_id=twins[0], type="agent.message", body={"content": TEXT})
    services.events_append(session_id=twins[0], events=[MESSAGE])  # not visible until acknowledged
    with CaptureQueriesContext(connection) as queries:
        read = logs.read(twins[0])
    assert [event.id for event in read] == [first.id, second.id]
    assert "> 1" in queries[0]["sql"]  # only after the last seq it knew
    logs.read(twins[1])
    assert list(logs._logs) == [twins[1]]  # one session kept
