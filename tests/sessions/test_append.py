"""The append's lean path: the same values and errors as the serializer and the checked write, one
statement per append on PostgreSQL, the runtime told on commit, order and durability under concurrency."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest
from django.db import connection
from rest_framework import serializers
from rest_framework.test import APIClient

from registry.runtime.wakeups import listen_parameters
from registry.sessions import log, notify
from registry.sessions.events import SendEventsSerializer, validated_events
from registry.sessions.models import Session, SessionEvent
from registry.sessions.services import UNCONDITIONAL_KINDS
from tests.support.tenants import Tenant

TEXT = [{"type": "text", "text": "hello"}]
MESSAGE = {"type": "user.message", "content": TEXT}


def by_serializer(data: Any) -> Any:
    """What `SendEventsSerializer` makes of a body: its events, or its error detail."""
    body = SendEventsSerializer(data=data)
    return body.validated_data["events"] if body.is_valid() else body.errors


def by_validated_events(data: Any) -> Any:
    try:
        return validated_events(data)
    except serializers.ValidationError as error:
        return error.detail


@pytest.mark.parametrize(
    "data",
    [
        {"events": [MESSAGE]},
        {"events": [{"type": "user.message", "content": [{"type": "text", "text": ""}]}]},
        {"events": [{"type": "user.message", "content": [{"type": "text", "text": "  ünïcødé ✓  "}]}]},
        {"events": [{"type": "user.message", "content": [*TEXT, {"type": "text", "text": "two"}]}]},
        {"events": [MESSAGE] * 100},
        {"events": [MESSAGE] * 101},
        {"events": []},
        {"events": [MESSAGE], "extra": 1},
        {"events": "no"},
        ["events"],
        {"events": [{"type": "user.message", "content": []}]},
        {"events": [{"type": "user.message", "content": TEXT, "extra": 1}]},
        {"events": [{"type": "user.message", "content": [{"type": "text", "text": "a\x00b"}]}]},
        {"events": [{"type": "user.message", "content": [{"type": "text", "text": "a\ud800b"}]}]},
        {"events": [{"type": "user.message", "content": [{"type": "text", "text": "x" * 1_000_001}]}]},
        {"events": [{"type": "user.message", "content": [{"type": "text", "text": 5}]}]},
        {"events": [{"type": "user.message", "content": [{"type": "text", "text": "t", "cache": 1}]}]},
        {"events": [{"type": "user.message", "content": [{"type": "image", "source": {"type": "url", "url": "u"}}]}]},
        {"events": [MESSAGE, {"type": "user.interrupt"}]},
        {"events": [{"type": "user.mesage", "content": TEXT}]},
    ],
)
def test_validated_events_match_the_serializer(data: Any) -> None:
    assert by_validated_events(data) == by_serializer(data)


@pytest.fixture
def session_ids(tenant: Tenant) -> list[str]:
    """Two sessions of the tenant's workspace."""
    agent = tenant.client.post("/v1/agents", {"name": "a", "model": "m"}, format="json").json()
    environment = tenant.client.post("/v1/environments", {"name": "e"}, format="json").json()
    body = {"agent": agent["id"], "environment_id": environment["id"]}
    return [tenant.client.post("/v1/sessions", body, format="json").json()["id"] for _ in range(2)]


def send(api: APIClient, session_id: str, *events: dict[str, Any]) -> Any:
    return api.post(f"/v1/sessions/{session_id}/events", {"events": list(events)}, format="json")


def envelope(response: Any) -> dict[str, Any]:
    """The error body without its request id."""
    body = response.json()
    body.pop("request_id", None)
    return {"status": response.status_code, **body}


CONDITIONAL = {"type": "user.tool_confirmation", "tool_use_id": "sevt_x", "result": "allow"}


def test_lean_and_checked_appends_refuse_alike(api: APIClient, other_tenant: Tenant, session_ids: list[str]) -> None:
    """A terminated session, another workspace's or an unknown one: the same envelopes either way."""
    assert MESSAGE["type"] in UNCONDITIONAL_KINDS and CONDITIONAL["type"] not in UNCONDITIONAL_KINDS
    terminated, live = session_ids
    log.transition(session_id=terminated, status=Session.Status.TERMINATED)
    for target, client in ((terminated, api), (live, other_tenant.client), ("sesn_unknown", api)):
        lean, checked = send(client, target, MESSAGE), send(client, target, CONDITIONAL)
        assert lean.status_code in (400, 404)
        assert envelope(lean) == envelope(checked)
    assert not SessionEvent.objects.filter(session_id__in=session_ids, type__startswith="user.").exists()


def test_lean_append_stores_what_the_checked_one_stores(api: APIClient, session_ids: list[str]) -> None:
    outcome = {"type": "user.define_outcome", "description": "d", "rubric": {"type": "text", "content": "r"}}
    response = send(api, session_ids[0], MESSAGE, {"type": "user.interrupt"}, outcome)
    assert response.status_code == 200, response.content
    answered = response.json()["data"]
    stored = list(SessionEvent.objects.filter(session_id=session_ids[0]).order_by("created_at", "id"))
    assert [(event.id, event.type, event.seq, event.processed_at) for event in stored] == [
        (item["id"], item["type"], None, None) for item in answered
    ]
    assert stored[0].body == {"content": TEXT}
    assert stored[2].body["outcome_id"].startswith("outc_") and stored[2].body["max_iterations"] == 3
    assert Session.objects.get(pk=session_ids[0]).has_pending_events
    assert not Session.objects.get(pk=session_ids[1]).has_pending_events


@pytest.mark.django_db(transaction=True)
def test_runtime_is_notified_on_commit_and_concurrent_appends_all_land_in_order(tenant: Tenant) -> None:
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
