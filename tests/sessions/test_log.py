"""The session log's operations, each with one definition, held to the same results on both databases:
every case here runs on PostgreSQL (the suite's database) and again on SQLite (`test_..._sqlite`
runs this module in a child pytest with `DATABASE_URL=sqlite:...`). Cases named `..._postgresql` check
what only PostgreSQL does (one statement per write, commits that skip the WAL flush)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.db import connection, transaction
from django.db.models import F
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from registry.runtime.eventlog import VisibleLogs
from registry.sessions import log, notify, services
from registry.sessions.models import Session, SessionEvent
from registry.sessions.notify import listen_parameters
from tests.support.sqlite_rerun import rerun_on_sqlite
from tests.support.tenants import Tenant

TEXT = [{"type": "text", "text": "hi"}]
MESSAGE = {"type": "user.message", "content": TEXT}
ROOT = Path(__file__).resolve().parents[2]


def state(session_id: str) -> dict[str, Any]:
    """What the writes left: the session's log fields and its visible log (without ids and times)."""
    fields = Session.objects.values("status", "stop_reason", "turn_attempts", "last_seq", "has_pending_events")
    events = SessionEvent.objects.filter(session_id=session_id).order_by(F("seq").asc(nulls_last=True), "created_at")
    return {**fields.get(pk=session_id), "log": [(event.seq, event.type, event.body) for event in events]}


@pytest.fixture
def sessions(api: APIClient) -> list[str]:
    """Two idle sessions of the tenant's workspace."""
    agent = api.post("/v1/agents", {"name": "a", "model": "m"}, format="json").json()
    environment = api.post("/v1/environments", {"name": "e"}, format="json").json()
    body = {"agent": agent["id"], "environment_id": environment["id"]}
    return [api.post("/v1/sessions", body, format="json").json()["id"] for _ in range(2)]


def test_transitions_follow_the_lifecycle_table(sessions: list[str]) -> None:
    session_id = sessions[0]
    Session.objects.filter(pk=session_id).update(turn_attempts=2)
    for status in ("running", "rescheduling", "running"):
        assert log.transition(session_id=session_id, status=status) is not None
    assert state(session_id)["turn_attempts"] == 2
    stopped = log.transition(session_id=session_id, status="idle", stop_reason={"type": "end_turn"})
    assert stopped is not None and stopped.seq == 4
    assert log.transition(session_id=session_id, status="idle") is None  # already idle: nothing written
    with pytest.raises(ValueError):
        log.transition(session_id=session_id, status="rescheduling")  # not from idle
    log.transition(session_id=session_id, status="terminated")
    with pytest.raises(log.SessionTerminated):
        log.transition(session_id=session_id, status="running")
    after = state(session_id)
    assert after["status"] == "terminated" and after["turn_attempts"] == 0 and after["last_seq"] == 5
    assert [(seq, kind) for seq, kind, _ in after["log"]] == [
        (1, "session.status_running"),
        (2, "session.status_rescheduled"),
        (3, "session.status_running"),
        (4, "session.status_idle"),
        (5, "session.status_terminated"),
    ]
    assert after["log"][3][2] == {"stop_reason": {"type": "end_turn"}}


def test_acknowledgment_numbers_pending_events_in_append_order_once(sessions: list[str]) -> None:
    session_id = sessions[0]
    services.events_append(session_id=session_id, events=[MESSAGE, {"type": "user.interrupt"}, MESSAGE])
    log.emit(session_id=session_id, type="agent.message", body={"content": TEXT})
    pending = list(SessionEvent.objects.filter(session_id=session_id, seq=None).order_by("created_at", "id"))
    chosen = [pending[i].id for i in (2, 0, 2)]  # out of order, one twice
    assert log.acknowledge(session_id=session_id, event_ids=chosen) == 2
    assert log.acknowledge(session_id=session_id, event_ids=chosen) == 0  # already visible
    after = state(session_id)
    assert [seq for seq, *_ in after["log"]] == [1, 2, 3, None]
    assert after["has_pending_events"] and after["last_seq"] == 3  # the interrupt is still pending
    log.acknowledge(session_id=session_id, event_ids=[pending[1].id])
    assert not state(session_id)["has_pending_events"]


def test_a_superseded_fence_is_refused_by_every_write(sessions: list[str]) -> None:
    session_id = sessions[0]
    services.events_append(session_id=session_id, events=[MESSAGE])
    [claim] = log.claim(owner="a", seconds=30, limit=1)
    stale = log.Fence(session_id, "a", claim.fence.token - 1)
    pending = SessionEvent.objects.get(session_id=session_id).id
    writes = [
        lambda fence: log.acknowledge(session_id=session_id, event_ids=[pending], fence=fence),
        lambda fence: log.emit(session_id=session_id, type="agent.message", body={"content": TEXT}, fence=fence),
        lambda fence: log.transition(session_id=session_id, status="running", fence=fence),
        lambda fence: log.add_usage(session_id=session_id, usage={"input_tokens": 1}, fence=fence),
        lambda fence: log.record_evaluation(session_id=session_id, evaluation={"outcome_id": "o"}, fence=fence),
    ]
    for write in writes:
        with pytest.raises(log.LeaseLost, match="no longer held") as taken_over:
            write(stale)
        assert not isinstance(taken_over.value, log.SessionTerminated)
    assert state(session_id)["log"] == [(None, "user.message", {"content": TEXT})]
    for write in writes:
        write(claim.fence)
    log.transition(session_id=session_id, status="terminated")  # the API's archive: final for the holder
    with pytest.raises(log.SessionTerminated, match="archived or terminated"):  # the turn ends, not a lost lease
        log.emit(session_id=session_id, type="agent.message", body={}, fence=claim.fence)
    with pytest.raises(log.SessionTerminated, match="deleted"):
        log.emit(session_id="sesn_gone", type="agent.message", body={})


def test_claims_are_exclusive_renewed_and_released(sessions: list[str]) -> None:
    first, second = sessions
    services.events_append(session_id=first, events=[MESSAGE])
    [claim] = log.claim(owner="a", seconds=30, limit=10)
    assert claim.fence.session_id == first and claim.attempts == 1  # the idle one has no work
    assert log.claim(owner="b", seconds=30, limit=10) == []  # held
    assert log.renew(owner="a", fences=[claim.fence, log.Fence(second, "a", 1)], seconds=30) == {first}
    log.release(claim.fence)
    [again] = log.claim(owner="b", seconds=30, limit=10)
    assert again.fence.token == claim.fence.token + 1
    assert log.renew(owner="a", fences=[claim.fence], seconds=30) == set()  # taken over
    log.transition(session_id=first, status="running", fence=again.fence)
    log.release(again.fence, keep_attempt=False)  # left at shutdown: not counted
    [orphaned] = log.claim(owner="c", seconds=30, limit=10)
    assert orphaned.fence.session_id == first and orphaned.attempts == 1
    assert log.claim(owner="c", seconds=30, limit=0) == []


def test_usage_and_evaluations_accumulate(sessions: list[str]) -> None:
    session_id = sessions[0]
    usage = {"input_tokens": 3, "output_tokens": 2, "cache_creation_input_tokens": 5}
    log.add_usage(session_id=session_id, usage=usage, list_cost_usd=Decimal("0.5"), active_seconds=1.5)
    log.add_usage(session_id=session_id, usage=usage, list_cost_usd=Decimal("0.25"))
    session = Session.objects.get(pk=session_id)
    assert session.usage["input_tokens"] == 6 and session.usage["output_tokens"] == 4
    assert session.usage["cache_creation"]["ephemeral_5m_input_tokens"] == 10
    assert session.list_cost_usd == Decimal("0.75") and session.active_seconds == 1.5
    for result in ("running", "satisfied"):
        log.record_evaluation(session_id=session_id, evaluation={"outcome_id": "o1", "result": result})
    log.record_evaluation(session_id=session_id, evaluation={"outcome_id": "o2", "result": "running"})
    evaluations = Session.objects.get(pk=session_id).outcome_evaluations
    assert [(item["outcome_id"], item["result"]) for item in evaluations] == [("o1", "satisfied"), ("o2", "running")]


def test_visible_logs_read_only_what_is_new_and_keep_the_latest_sessions(sessions: list[str]) -> None:
    logs = VisibleLogs(sessions=1)
    first = log.emit(session_id=sessions[0], type="agent.message", body={"content": TEXT})
    assert [event.id for event in logs.read(sessions[0])] == [first.id]
    second = log.emit(session_id=sessions[0], type="agent.message", body={"content": TEXT})
    services.events_append(session_id=sessions[0], events=[MESSAGE])  # not visible until acknowledged
    with CaptureQueriesContext(connection) as queries:
        read = logs.read(sessions[0])
    assert [event.id for event in read] == [first.id, second.id]
    assert len(queries) == 1 and "> 1" in queries[0]["sql"]  # only after the last seq it knew
    logs.read(sessions[1])
    assert list(logs._logs) == [sessions[1]]  # one session kept


def test_writes_are_one_statement_each_on_postgresql(sessions: list[str]) -> None:
    session_id = sessions[0]

    def statements(write: Callable[[], object]) -> int:
        with CaptureQueriesContext(connection) as queries:
            write()
        return len(queries)

    assert statements(lambda: services.events_append(session_id=session_id, events=[MESSAGE, MESSAGE])) == 1
    assert statements(lambda: log.emit(session_id=session_id, type="agent.message", body={"content": TEXT})) == 1
    assert statements(lambda: log.transition(session_id=session_id, status="running")) == 1
    pending = [event.id for event in SessionEvent.objects.filter(session_id=session_id, seq=None)]
    assert statements(lambda: log.acknowledge(session_id=session_id, event_ids=pending)) == 1
    assert [seq for seq, *_ in state(session_id)["log"]] == [1, 2, 3, 4]


@pytest.mark.django_db(transaction=True)  # real transactions: the setting lasts until its commit
def test_an_unflushed_event_relaxes_only_its_own_transaction_on_postgresql(sessions: list[str]) -> None:
    for flush, expected in ((True, "on"), (False, "off")):
        with transaction.atomic(), connection.cursor() as cursor:
            log.emit(session_id=sessions[0], type="span.model_request_start", body={}, flush=flush)
            cursor.execute("SHOW synchronous_commit")
            assert cursor.fetchone() == (expected,)
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        assert cursor.fetchone() == ("on",)


def send(api: APIClient, session_id: str, *events: dict[str, Any]) -> Any:
    return api.post(f"/v1/sessions/{session_id}/events", {"events": list(events)}, format="json")


def envelope(response: Any) -> dict[str, Any]:
    """The error body without its request id."""
    body = response.json()
    body.pop("request_id", None)
    return {"status": response.status_code, **body}


CONDITIONAL = {"type": "user.tool_confirmation", "tool_use_id": "sevt_x", "result": "allow"}


def test_the_api_refuses_appends_alike_whatever_the_kind(
    api: APIClient, other_tenant: Tenant, sessions: list[str]
) -> None:
    """A terminated session, another workspace's or an unknown one: one envelope, whether the append needs a
    look at the log or not."""
    assert MESSAGE["type"] in services.UNCONDITIONAL_KINDS
    assert CONDITIONAL["type"] not in services.UNCONDITIONAL_KINDS
    terminated, live = sessions
    log.transition(session_id=terminated, status=Session.Status.TERMINATED)
    for target, client in ((terminated, api), (live, other_tenant.client), ("sesn_unknown", api)):
        lean, checked = send(client, target, MESSAGE), send(client, target, CONDITIONAL)
        assert lean.status_code in (400, 404)
        assert envelope(lean) == envelope(checked)
    assert not SessionEvent.objects.filter(session_id__in=sessions, type__startswith="user.").exists()


def test_an_append_stores_pending_events_in_order(api: APIClient, sessions: list[str]) -> None:
    outcome = {"type": "user.define_outcome", "description": "d", "rubric": {"type": "text", "content": "r"}}
    response = send(api, sessions[0], MESSAGE, {"type": "user.interrupt"}, outcome)
    assert response.status_code == 200, response.content
    answered = response.json()["data"]
    stored = list(SessionEvent.objects.filter(session_id=sessions[0]).order_by("created_at", "id"))
    assert [(event.id, event.type, event.seq, event.processed_at) for event in stored] == [
        (item["id"], item["type"], None, None) for item in answered
    ]
    assert stored[0].body == {"content": TEXT}
    assert stored[2].body["outcome_id"].startswith("outc_") and stored[2].body["max_iterations"] == 3
    assert Session.objects.get(pk=sessions[0]).has_pending_events
    assert not Session.objects.get(pk=sessions[1]).has_pending_events


@pytest.mark.django_db(transaction=True)
def test_concurrent_appends_all_land_in_order_and_wake_the_runtime_on_postgresql(tenant: Tenant) -> None:
    agent = tenant.client.post("/v1/agents", {"name": "a", "model": "m"}, format="json").json()
    environment = tenant.client.post("/v1/environments", {"name": "e"}, format="json").json()
    body = {"agent": agent["id"], "environment_id": environment["id"]}
    session_id = tenant.client.post("/v1/sessions", body, format="json").json()["id"]
    heard: list[str] = []
    notify.add_local_runtime_listener(heard.append)
    listening = psycopg.connect(**listen_parameters(), autocommit=True)  # type: ignore[arg-type]
    try:
        listening.execute(f"LISTEN {notify.RUNTIME_CHANNEL}")
        answers: dict[int, list[str]] = {}

        def writer(number: int) -> None:
            client = APIClient()
            client.credentials(HTTP_X_API_KEY=tenant.api_key)
            texts = [{"type": "user.message", "content": [{"type": "text", "text": f"{number}.{i}"}]} for i in range(5)]
            ids = []
            for text in texts:  # one writer's appends, one after another
                response = send(client, session_id, text)
                assert response.status_code == 200, response.content
                ids.append(response.json()["data"][0]["id"])
            answers[number] = ids
            connection.close()

        threads = [threading.Thread(target=writer, args=(number,)) for number in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        payloads = [message.payload for message in listening.notifies(timeout=1.0, stop_after=40)]
    finally:
        notify.remove_local_runtime_listener(heard.append)
        listening.close()
    assert payloads == [session_id] * 40 and heard == [session_id] * 40
    stored = list(SessionEvent.objects.filter(session_id=session_id).order_by("created_at", "id"))
    assert len(stored) == 40
    for number, ids in answers.items():  # each writer's events in the order its requests were answered
        assert [event.id for event in stored if event.id in ids] == ids
        assert [event.body["content"][0]["text"] for event in stored if event.id in ids] == [
            f"{number}.{i}" for i in range(5)
        ]


def test_every_case_also_holds_on_sqlite(tmp_path: Path) -> None:
    """The cases above, again, in a child pytest whose database is SQLite."""
    assert connection.vendor == "postgresql"  # the suite's own run is the PostgreSQL half
    rerun_on_sqlite(__file__, tmp_path, selection="not postgresql and not sqlite", passed=8)
