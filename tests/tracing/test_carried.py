"""Without an OTLP endpoint nothing is recorded, but the caller's `traceparent` is still carried: stored with
the user events it appended (and never rendered), and sent on by the model client as it came."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from rest_framework.test import APIClient

from fakes import model as replies
from fakes.model import FakeModel
from registry.core import tracing
from registry.core.middleware import route_template
from registry.runtime.config import RuntimeSettings
from registry.runtime.model import ModelClient
from registry.sessions import log, selectors
from registry.sessions.models import SessionEvent

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
MESSAGE = {"type": "user.message", "content": [{"type": "text", "text": "hi"}]}


@pytest.fixture(autouse=True)
def no_export(settings: Any) -> Iterator[None]:
    settings.OTEL_EXPORTER_OTLP_ENDPOINT = settings.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT = ""
    tracing.shutdown()  # tracers are made once per process: forget any made under other settings
    yield
    tracing.shutdown()


@pytest.fixture
def session_id(api: APIClient) -> str:
    agent = api.post("/v1/agents", {"name": "a", "model": "m"}, format="json").json()
    environment = api.post("/v1/environments", {"name": "e"}, format="json").json()
    body = {"agent": agent["id"], "environment_id": environment["id"]}
    return str(api.post("/v1/sessions", body, format="json").json()["id"])


def test_appended_events_keep_the_callers_traceparent_and_never_show_it(api: APIClient, session_id: str) -> None:
    sent = api.post(
        f"/v1/sessions/{session_id}/events", {"events": [MESSAGE, MESSAGE]}, format="json", HTTP_TRACEPARENT=TRACEPARENT
    )
    assert sent.status_code == 200, sent.content
    stored = SessionEvent.objects.filter(session_id=session_id, type="user.message")
    assert [event.body[tracing.TRACEPARENT_FIELD] for event in stored] == [TRACEPARENT, TRACEPARENT]

    log.acknowledge(session_id=session_id, event_ids=[event.id for event in stored])  # listed now
    for native in ("", "1"):
        listed = api.get(f"/v1/sessions/{session_id}/events", HTTP_NATIVE_BETA=native)
        assert listed.status_code == 200 and b"traceparent" not in listed.content


@pytest.mark.parametrize("header", [None, "00-not-a-trace-01"])
def test_without_a_valid_traceparent_nothing_is_stored(api: APIClient, session_id: str, header: str | None) -> None:
    headers: dict[str, Any] = {"HTTP_TRACEPARENT": header} if header else {}
    api.post(f"/v1/sessions/{session_id}/events", {"events": [MESSAGE]}, format="json", **headers)
    [stored] = SessionEvent.objects.filter(session_id=session_id, type="user.message")
    assert tracing.TRACEPARENT_FIELD not in stored.body


def test_the_model_client_sends_the_carried_traceparent() -> None:
    model = FakeModel()
    client = ModelClient(base_url=model.url, config=RuntimeSettings.from_settings())
    try:
        model.add(replies.verdict("satisfied", "ok"))
        with tracing.continuing(TRACEPARENT, "session.turn", service=tracing.RUNTIME_SERVICE):
            client.create({"model": "m", "max_tokens": 8, "messages": []}, {})
        model.add(replies.verdict("satisfied", "ok"))
        client.create({"model": "m", "max_tokens": 8, "messages": []}, {})  # outside any trace: no header
    finally:
        client.close()
        model.stop()
    assert [recorded.headers.get("traceparent") for recorded in model.requests] == [TRACEPARENT, None]


def test_route_templates_name_their_parameters_in_braces() -> None:
    assert route_template("v1/sessions/<sesn_id:id>/events") == "/v1/sessions/{id}/events"
    assert route_template("v1/agents/<id>") == "/v1/agents/{id}"
    assert route_template("healthz") == "/healthz"


def test_a_resumed_turn_continues_the_trace_of_the_latest_user_event(api: APIClient, session_id: str) -> None:
    for traceparent in (TRACEPARENT, TRACEPARENT.replace("b7ad", "c8be")):
        api.post(
            f"/v1/sessions/{session_id}/events", {"events": [MESSAGE]}, format="json", HTTP_TRACEPARENT=traceparent
        )
    pending = SessionEvent.objects.filter(session_id=session_id, seq__isnull=True).order_by("created_at", "id")
    log.acknowledge(session_id=session_id, event_ids=[event.id for event in pending])
    resumed_from = selectors.latest_user_traceparent(session_id, tracing.TRACEPARENT_FIELD)
    assert resumed_from == TRACEPARENT.replace("b7ad", "c8be")
