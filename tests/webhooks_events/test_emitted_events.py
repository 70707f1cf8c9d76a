"""The webhook events each change writes into the outbox, caused through the API or by the runtime: every row's
`data` is the reference client's `BetaWebhook*EventData` of its type (the session's id, its workspace, this
deployment's organisation, the extra field of its family), and the payload a delivery posts parses into that
class. A change that fails writes none, and so does a session's ordinary event."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import anthropic
import pytest
from django.conf import settings
from django.db import transaction

from fakes import model as replies
from registry.sessions import log
from registry.sessions.models import Session
from registry.sessions.services import session_create
from registry.webhooks import outbox
from registry.webhooks.event_types import DEPLOYMENT, DEPLOYMENT_RUN, EXTRA_FIELDS, WORKSPACE_EVENT_TYPES
from registry.webhooks.models import WebhookEvent
from tests.support import tenants
from tests.support.api_errors import assert_error
from tests.support.mcp_servers import ShopMcpServer
from tests.support.runtime.sessions import (
    MODEL,
    WEATHER_TOOL,
    Conversation,
    of_type,
    price_per_million,
    shop_agent,
    stop_reasons,
)
from tests.support.tenants import Tenant

# The workspace event types the tests below cause and check, for comparison with `WORKSPACE_EVENT_TYPES`.
COVERED_EVENT_TYPES = (
    "agent.created",
    "agent.updated",
    "agent.archived",
    "environment.created",
    "environment.updated",
    "environment.archived",
    "environment.deleted",
    "session.created",
    "session.updated",
    "session.archived",
    "session.deleted",
    "session.requires_action",
    "session.budget_reached",
    "session.outcome_evaluation_ended",
    "session.pending",
    "session.running",
    "session.idled",
    "session.status_rescheduled",
    "session.status_run_started",
    "session.status_idled",
    "session.status_terminated",
    "session.thread_created",
    "session.thread_idled",
    "session.thread_terminated",
    "memory_store.created",
    "memory_store.archived",
    "memory_store.deleted",
    "vault.created",
    "vault.archived",
    "vault.deleted",
    "vault_credential.created",
    "vault_credential.archived",
    "vault_credential.deleted",
    "vault_credential.refresh_failed",
)
# The other workspace types, and why these tests cause none of them.
NOT_COVERED = {
    "agent.deleted": "the API deletes no agent",
    **dict.fromkeys(DEPLOYMENT + DEPLOYMENT_RUN, "the deployments app writes and tests its own"),
}
INVALID, CONFLICT = "invalid_request_error", "conflict_error"
READER = anthropic.Anthropic(api_key="x")  # parses payloads only: it never sends a request


def data_class_name(event_type: str) -> str:
    """`session.status_run_started` -> `BetaWebhookSessionStatusRunStartedEventData`."""
    return "BetaWebhook" + "".join(word.capitalize() for word in re.split(r"[._]", event_type)) + "EventData"


def emitted(object_id: str, workspace_id: str) -> list[str]:
    """The types of the events about `object_id`, in outbox order, each checked as a subscriber reads it."""
    events = list(WebhookEvent.objects.filter(data__id=object_id).order_by("seq"))
    for event in events:
        assert event.workspace_id == workspace_id
        common = {
            "type": event.type,
            "id": object_id,
            "workspace_id": workspace_id,
            "organization_id": settings.REGISTRY_ORGANIZATION_ID,
        }
        assert {key: event.data.get(key) for key in common} == common
        extra = set(event.data) - set(common)
        assert extra == ({EXTRA_FIELDS[event.type]} if event.type in EXTRA_FIELDS else set())
        parsed = READER.beta.webhooks.parse_unverified(json.dumps(outbox.payload(event)))
        assert parsed.type == "event" and parsed.id == event.id and parsed.created_at == event.created_at
        data_class = type(parsed.data)
        assert data_class.__name__ == data_class_name(event.type)
        assert data_class.model_validate(event.data) == parsed.data  # every field its type requires
    return [event.type for event in events]


def extras(object_id: str, field: str) -> set[str]:
    """The values of the extra `field` in the events about `object_id` that carry it."""
    return {event.data[field] for event in WebhookEvent.objects.filter(data__id=object_id) if field in event.data}


def workspace_of(chat: Conversation) -> str:
    return str(Session.objects.get(pk=chat.session_id).workspace_id)


def test_the_covered_types_and_the_others_are_every_workspace_type() -> None:
    assert len(set(COVERED_EVENT_TYPES)) == len(COVERED_EVENT_TYPES)
    assert set(COVERED_EVENT_TYPES).isdisjoint(NOT_COVERED)
    assert set(COVERED_EVENT_TYPES) | set(NOT_COVERED) == set(WORKSPACE_EVENT_TYPES)


# -- changes through the API -------------------------------------------------------------------------------------
def test_an_agent_is_created_updated_and_archived_once_each(api, tenant: Tenant) -> None:
    agent = api.post("/v1/agents", {"name": "a", "model": "m"}, format="json").json()
    path = f"/v1/agents/{agent['id']}"
    assert api.post(path, {"version": 1, "system": "Be brief."}, format="json").json()["version"] == 2
    assert api.post(path, {"version": 2, "system": "Be brief."}, format="json").json()["version"] == 2  # no change
    assert api.post(f"{path}/archive").json()["archived_at"]
    assert api.post(f"{path}/archive").status_code == 200  # archived already: nothing changes
    assert emitted(agent["id"], tenant.workspace.pk) == ["agent.created", "agent.updated", "agent.archived"]


def test_an_environment_is_created_updated_archived_and_deleted(api, tenant: Tenant) -> None:
    environment = api.post("/v1/environments", {"name": "e"}, format="json").json()
    path = f"/v1/environments/{environment['id']}"
    assert api.post(path, {"description": "Python"}, format="json").status_code == 200
    assert api.post(f"{path}/archive").json()["archived_at"]
    assert api.post(f"{path}/archive").status_code == 200
    assert api.delete(path).json()["type"] == "environment_deleted"
    assert emitted(environment["id"], tenant.workspace.pk) == [
        "environment.created",
        "environment.updated",
        "environment.archived",
        "environment.deleted",
    ]


def test_a_memory_store_is_created_archived_and_deleted(api, tenant: Tenant) -> None:
    store = api.post("/v1/memory_stores", {"name": "notes"}, format="json").json()
    path = f"/v1/memory_stores/{store['id']}"
    assert api.post(path, {"description": "kept"}, format="json").status_code == 200  # the type has no update event
    assert api.post(f"{path}/archive").json()["archived_at"]
    assert api.delete(path).status_code == 200
    assert emitted(store["id"], tenant.workspace.pk) == [
        "memory_store.created",
        "memory_store.archived",
        "memory_store.deleted",
    ]


def test_vaults_and_their_credentials_are_created_archived_and_deleted(api, tenant: Tenant) -> None:
    vault = api.post("/v1/vaults", {"display_name": "keys"}, format="json").json()
    credentials = f"/v1/vaults/{vault['id']}/credentials"
    auth = {"type": "static_bearer", "token": "t", "mcp_server_url": "https://mcp.example.com/mcp"}
    kept, dropped, swept = (api.post(credentials, {"auth": auth}, format="json").json() for _ in range(3))
    assert api.post(f"{credentials}/{kept['id']}/archive").json()["archived_at"]
    assert api.post(f"{credentials}/{kept['id']}/archive").status_code == 200
    assert api.delete(f"{credentials}/{dropped['id']}").json()["type"] == "vault_credential_deleted"
    assert api.post(f"/v1/vaults/{vault['id']}/archive").json()["archived_at"]
    assert api.post(f"/v1/vaults/{vault['id']}/archive").status_code == 200
    assert api.delete(f"/v1/vaults/{vault['id']}").json()["type"] == "vault_deleted"  # with its credentials

    workspace_id = tenant.workspace.pk
    assert emitted(vault["id"], workspace_id) == ["vault.created", "vault.archived", "vault.deleted"]
    assert emitted(dropped["id"], workspace_id) == ["vault_credential.created", "vault_credential.deleted"]
    archived_then_swept = ["vault_credential.created", "vault_credential.archived", "vault_credential.deleted"]
    assert emitted(kept["id"], workspace_id) == archived_then_swept
    assert emitted(swept["id"], workspace_id) == ["vault_credential.created", "vault_credential.deleted"]
    assert extras(kept["id"], "vault_id") == extras(dropped["id"], "vault_id") == extras(swept["id"], "vault_id")
    assert extras(kept["id"], "vault_id") == {vault["id"]}


def test_a_session_is_created_updated_archived_and_deleted_and_user_events_write_none(api, tenant: Tenant) -> None:
    session_id = tenants.open_session(api)
    path = f"/v1/sessions/{session_id}"
    assert api.post(path, {"title": "Chat"}, format="json").json()["title"] == "Chat"
    message = {"type": "user.message", "content": [{"type": "text", "text": "hi"}]}
    assert api.post(f"{path}/events", {"events": [message, message]}, format="json").status_code == 200
    assert api.post(f"{path}/archive").json()["status"] == "terminated"
    assert api.delete(path).json()["type"] == "session_deleted"
    assert emitted(session_id, tenant.workspace.pk) == [
        "session.created",
        "session.updated",
        "session.archived",
        "session.status_terminated",
        "session.deleted",
    ]


def test_a_change_that_fails_writes_no_event(api, tenant: Tenant) -> None:
    agent = api.post("/v1/agents", {"name": "a", "model": "m"}, format="json").json()
    environment = api.post("/v1/environments", {"name": "e"}, format="json").json()
    before = WebhookEvent.objects.count()

    bad_tool = {"type": "custom", "name": "x", "description": "d", "input_schema": {"type": "array"}}
    assert_error(api.post(f"/v1/agents/{agent['id']}", {"tools": [bad_tool]}, format="json"), 400, INVALID)
    assert_error(api.post(f"/v1/agents/{agent['id']}", {"version": 7, "name": "b"}, format="json"), 409, CONFLICT)
    config = {"type": "cloud", "networking": {"type": "limited"}, "packages": {"pip": ["requests"]}}
    path = f"/v1/environments/{environment['id']}"
    assert_error(api.post(path, {"config": config}, format="json"), 400, INVALID, "allow_package_managers")
    unknown = {"agent": agent["id"], "environment_id": "env_none"}
    assert_error(api.post("/v1/sessions", unknown, format="json"), 400, INVALID, "environment_id")
    assert WebhookEvent.objects.count() == before


def test_events_roll_back_with_the_change_that_wrote_them(tenant: Tenant) -> None:
    """A service's events are in its caller's transaction: the session log's status change too (one statement
    on PostgreSQL), and a session's creation."""
    session = Session.objects.get(pk=tenants.open_session(tenant.client))
    values = {"agent": {"type": "agent", "id": session.agent_id}, "environment_id": session.environment_id}
    before = WebhookEvent.objects.count()
    with pytest.raises(RuntimeError), transaction.atomic():
        log.transition(session_id=session.pk, status=Session.Status.RUNNING)
        session_create(workspace=tenant.workspace, values=values)
        assert WebhookEvent.objects.count() == before + 3
        raise RuntimeError("the change fails after its events were written")
    assert WebhookEvent.objects.count() == before
    assert Session.objects.get().status == Session.Status.IDLE


# -- changes the runtime makes -------------------------------------------------------------------------------------
TURN = ["session.status_run_started", "session.running"]
IDLE = ["session.status_idled", "session.idled"]


@pytest.mark.e2e
def test_a_turn_writes_its_status_changes_and_none_for_its_messages(model, open_session) -> None:
    model.add(replies.text("Hello.", chunks=3))
    chat = open_session()
    chat.say("hi")
    events = chat.wait_idle()
    assert stop_reasons(events) == ["end_turn"] and of_type(events, "agent.message")
    assert emitted(chat.session_id, workspace_of(chat)) == ["session.created", *TURN, *IDLE]


@pytest.mark.e2e
def test_a_retried_model_call_reschedules_the_session(model, open_session) -> None:
    model.add(replies.failure(529), replies.text("made it"))
    chat = open_session()
    chat.say("hello?")
    assert stop_reasons(chat.wait_idle()) == ["end_turn"]
    rescheduled = ["session.status_rescheduled", "session.pending"]
    assert emitted(chat.session_id, workspace_of(chat)) == ["session.created", *TURN, *rescheduled, *TURN, *IDLE]


@pytest.mark.e2e
def test_a_custom_tool_call_requires_action(model, open_session) -> None:
    model.add(replies.tool_call("get_weather", {"city": "Paris"}))
    chat = open_session(tools=[WEATHER_TOOL])
    chat.say("weather in Paris?")
    assert stop_reasons(chat.wait_idle()) == ["requires_action"]
    expected = ["session.created", *TURN, *IDLE, "session.requires_action"]
    assert emitted(chat.session_id, workspace_of(chat)) == expected


@pytest.mark.e2e
def test_a_reached_budget_ends_the_turn(model, open_session, shop: ShopMcpServer, sdk: anthropic.Anthropic) -> None:
    price_per_million(MODEL, 1000)
    model.add(replies.tool_call("lookup_order", {"order_id": "A1"}), replies.text("never asked"))
    chat = open_session(**shop_agent(shop))
    created = chat.session()
    budget: Any = {"type": "limit", "max_list_cost": {"amount": "1", "currency": "USD"}}  # one cent
    session = sdk.beta.sessions.create(
        agent=created["agent"]["id"], environment_id=created["environment_id"], budget=budget
    )
    chat.session_id = session.id
    chat.say("spend")
    assert stop_reasons(chat.wait_idle()) == ["budget_reached"]
    expected = ["session.created", *TURN, *IDLE, "session.budget_reached"]
    assert emitted(chat.session_id, workspace_of(chat)) == expected


@pytest.mark.e2e
def test_each_outcome_evaluation_that_ends_writes_one(model, open_session) -> None:
    model.add(
        replies.text("draft"),
        replies.verdict("needs_revision", "Longer."),
        replies.text("a longer draft"),
        replies.verdict("satisfied", "Good."),
    )
    chat = open_session()
    chat.send({"type": "user.define_outcome", "description": "A draft", "rubric": {"type": "text", "content": "x"}})
    assert stop_reasons(chat.wait_idle()) == ["end_turn"]
    ended = ["session.outcome_evaluation_ended"] * 2
    assert emitted(chat.session_id, workspace_of(chat)) == ["session.created", *TURN, *ended, *IDLE]


@pytest.mark.e2e
def test_a_thread_is_created_idles_and_is_terminated(model, team: Callable[..., Conversation]) -> None:
    spawn = {"type": "tool_use", "name": "spawn_agent", "input": {"agent": "researcher", "message": "look"}}
    wait = {"type": "tool_use", "name": "wait_for_replies", "input": {}}
    # The orchestrator spawns and waits in one answer: the child's call is the next, then its own again.
    model.add(replies.Reply(blocks=[spawn, wait]), replies.text("found it"), replies.text("done"))
    chat = team()
    chat.say("research")
    assert stop_reasons(chat.wait_idle(timeout=60)) == ["end_turn"]
    [child] = list(chat.sdk.beta.sessions.threads.list(chat.session_id))[1:]
    assert child.status == "idle"
    chat.sdk.beta.sessions.threads.archive(child.id, session_id=chat.session_id)
    chat.sdk.beta.sessions.archive(chat.session_id)  # its thread is terminated already: no second event

    workspace_id = workspace_of(chat)
    assert emitted(chat.session_id, workspace_id) == [
        "session.created",
        *TURN,
        "session.thread_created",
        "session.thread_idled",
        *IDLE,
        "session.thread_terminated",
        "session.archived",
        "session.status_terminated",
    ]
    assert extras(chat.session_id, "session_thread_id") == {child.id}


@pytest.mark.e2e
def test_a_failed_token_refresh_writes_refresh_failed(
    model, open_session, shop: ShopMcpServer, sdk: anthropic.Anthropic, refusing_url: str
) -> None:
    vault = sdk.beta.vaults.create(display_name="shop keys")
    refresh = {
        "client_id": "c",
        "refresh_token": "r",
        "token_endpoint": refusing_url,  # nothing listens there
        "token_endpoint_auth": {"type": "none"},
    }
    auth: Any = {
        "type": "mcp_oauth",
        "access_token": "expired-token",
        "expires_at": "2020-01-01T00:00:00Z",
        "mcp_server_url": shop.url,
        "refresh": refresh,
    }
    credential = sdk.beta.vaults.credentials.create(vault.id, auth=auth)
    shop.authorizations.clear()
    model.add(replies.tool_call("lookup_order", {"order_id": "A1"}), replies.text("A1 shipped."))
    chat = open_session(vault_ids=[vault.id], **shop_agent(shop))
    chat.say("where is A1?")
    assert stop_reasons(chat.wait_idle()) == ["end_turn"]
    assert set(shop.authorizations) == {"Bearer expired-token"}  # the call goes on with the token it has

    workspace_id = workspace_of(chat)
    created, *failures = emitted(credential.id, workspace_id)
    # One per failed refresh: each use of the expired credential tries again.
    assert created == "vault_credential.created" and failures
    assert set(failures) == {"vault_credential.refresh_failed"}
    assert extras(credential.id, "vault_id") == {vault.id}
