"""Session threads through the API: the list (primary thread first, cursor pages, `statuses`), retrieve, archive,
each thread's events, the access of scoped credentials, the reference client's types, and the thread streams
against a live daphne (resumed without loss or repeat, ending at the thread's terminal event, the primary thread's
identical to the session's, previews only for their own thread). Threads are made as the runtime makes them,
through `thread_log` (unfenced)."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest
from anthropic.lib.environments._worker import _sessions_token_from_secret
from anthropic.types.beta import BetaManagedAgentsSessionThreadAgent
from anthropic.types.beta.sessions import (
    BetaManagedAgentsAgentMessageEvent,
    BetaManagedAgentsAgentThreadMessageReceivedEvent,
    BetaManagedAgentsSessionThread,
    BetaManagedAgentsSessionThreadStatusRunningEvent,
    BetaManagedAgentsSessionThreadStatusTerminatedEvent,
    BetaManagedAgentsTextBlock,
)
from django.db import connection
from rest_framework.test import APIClient

from registry.environments import services as environment_services
from registry.environments.models import Environment
from registry.sessions import log, notify, services, thread_log
from registry.sessions.consumers import StreamRefused, find_thread
from registry.sessions.models import Session, SessionThread, primary_thread_id
from registry.workspaces.scoped_credentials import mint_work_secret
from tests.support.api_errors import assert_error
from tests.support.clients import registry_client
from tests.support.live import live_registry
from tests.support.sqlite_rerun import rerun_on_sqlite
from tests.support.sse import FAST, Frame, parse_frames, resuming_reader
from tests.support.tenants import Tenant, make_tenant, open_session

pytestmark = pytest.mark.django_db(transaction=True)
TEXT = [{"type": "text", "text": "x"}]
TERMINATED = "session.status_terminated"
READERS = 5  # resuming readers of one child stream
STREAM_SECONDS = 20
USAGE = {"input_tokens": 100, "output_tokens": 20, "cache_read_input_tokens": 5, "cache_creation_input_tokens": 7}


# -- the runtime's writes, unfenced ------------------------------------------------------------------------------
def agent_of(api: APIClient, session_id: str, name: str) -> dict[str, Any]:
    """A thread's agent snapshot: the session's agent (as a thread shows it) under another name."""
    agent = api.get(f"/v1/sessions/{session_id}").json()["agent"]
    return {**{key: value for key, value in agent.items() if key != "multiagent"}, "name": name}


def spawn(api: APIClient, session_id: str, name: str, parent: str | None = None) -> SessionThread:
    parent = parent or primary_thread_id(session_id)
    depth = 1 if parent == primary_thread_id(session_id) else SessionThread.objects.get(pk=parent).depth + 1
    return thread_log.create(
        session_id=session_id,
        parent_thread_id=parent,
        depth=depth,
        agent_name=name,
        agent=agent_of(api, session_id, name),
        max_threads=100,
        fence=None,
    )


def say(thread: SessionThread, text: str = "x") -> None:
    thread_log.emit(thread=thread, type="agent.message", body={"content": [{"type": "text", "text": text}]}, fence=None)


def turn(thread: SessionThread, *texts: str) -> None:
    """A child's turn: running, its messages, idle."""
    thread_log.transition(thread=thread, status="running", fence=None)
    for text in texts:
        say(thread, text)
    thread_log.transition(thread=thread, status="idle", stop_reason={"type": "end_turn"}, fence=None)


class Family:
    """A session with three child threads: `researcher` and `writer` under the primary, `checker` under
    `researcher` (created last)."""

    def __init__(self, tenant: Tenant) -> None:
        self.tenant, self.api = tenant, tenant.client
        self.session_id = open_session(self.api)
        self.primary = primary_thread_id(self.session_id)
        self.researcher = spawn(self.api, self.session_id, "researcher")
        self.writer = spawn(self.api, self.session_id, "writer")
        self.checker = spawn(self.api, self.session_id, "checker", parent=self.researcher.pk)

    def url(self, thread_id: str = "", tail: str = "") -> str:
        base = f"/v1/sessions/{self.session_id}/threads"
        return base + (f"/{thread_id}" if thread_id else "") + tail

    def listed(self, **params: Any) -> list[str]:
        response = self.api.get(self.url(), params)
        assert response.status_code == 200, response.content
        return [thread["id"] for thread in response.json()["data"]]


@pytest.fixture
def family(db) -> Family:
    return Family(make_tenant("threads"))


# -- the list ---------------------------------------------------------------------------------------------------
def test_the_list_puts_the_primary_thread_first_then_the_children_by_creation(family):
    body = family.api.get(family.url()).json()
    assert [thread["id"] for thread in body["data"]] == [
        family.primary,
        family.researcher.pk,
        family.writer.pk,
        family.checker.pk,
    ]
    assert body["next_page"] is None
    primary, researcher, writer, checker = body["data"]
    session = family.api.get(f"/v1/sessions/{family.session_id}").json()
    assert primary["type"] == "session_thread" and primary["session_id"] == family.session_id
    assert primary["parent_thread_id"] is None and primary["archived_at"] is None
    assert primary["status"] == session["status"] == "idle" and primary["workflow_run_id"] is None
    assert primary["agent"] == {key: value for key, value in session["agent"].items() if key != "multiagent"}
    assert primary["created_at"] == session["created_at"]
    assert researcher["parent_thread_id"] == writer["parent_thread_id"] == family.primary
    assert checker["parent_thread_id"] == family.researcher.pk
    assert researcher["agent"] == family.researcher.agent and researcher["agent"]["name"] == "researcher"
    assert researcher["status"] == "idle" and researcher["stats"] is None and researcher["usage"] is None


def test_pages_follow_the_cursor_without_loss_or_repeat(family):
    first = family.api.get(family.url(), {"limit": 2}).json()
    assert [thread["id"] for thread in first["data"]] == [family.primary, family.researcher.pk]
    second = family.api.get(family.url(), {"limit": 2, "page": first["next_page"]}).json()
    assert [thread["id"] for thread in second["data"]] == [family.writer.pk, family.checker.pk]
    assert second["next_page"] is None

    walked, page = [], None
    while True:  # one at a time: the cursor after the primary thread, then after each child
        body = family.api.get(family.url(), {"limit": 1, **({"page": page} if page else {})}).json()
        walked += [thread["id"] for thread in body["data"]]
        page = body["next_page"]
        if page is None:
            break
    assert walked == family.listed()
    assert len(family.api.get(family.url(), {"limit": 4}).json()["data"]) == 4
    assert family.api.get(family.url(), {"limit": 4}).json()["next_page"] is None


@pytest.mark.parametrize("params", [{"limit": 0}, {"limit": 101}, {"limit": "x"}, {"page": "not-a-cursor"}])
def test_bad_limits_and_cursors_are_400(family, params):
    assert_error(family.api.get(family.url(), params), 400, "invalid_request_error", next(iter(params)))


def test_statuses_filter_the_primary_thread_and_the_children(family):
    thread_log.transition(thread=family.writer, status="running", fence=None)
    thread_log.transition(thread=family.checker, status="running", fence=None)
    assert family.listed(statuses="running") == [family.writer.pk, family.checker.pk]
    assert family.listed(statuses="idle") == [family.primary, family.researcher.pk]
    both = family.api.get(f"{family.url()}?statuses[]=idle&statuses[]=running").json()["data"]
    assert [thread["id"] for thread in both] == family.listed()
    assert family.listed(statuses=["running", "idle"]) == family.listed()
    assert family.listed(statuses="terminated") == []
    page = family.api.get(family.url(), {"statuses": "running", "limit": 1}).json()
    rest = family.api.get(family.url(), {"statuses": "running", "limit": 1, "page": page["next_page"]}).json()
    assert [thread["id"] for thread in page["data"] + rest["data"]] == [family.writer.pk, family.checker.pk]
    assert_error(family.api.get(family.url(), {"statuses": "sleeping"}), 400, "invalid_request_error", "statuses")


# -- retrieve, not found ---------------------------------------------------------------------------------------
def test_retrieve_a_child_and_the_primary_thread(family):
    child = family.api.get(family.url(family.checker.pk)).json()
    assert child["id"] == family.checker.pk and child["parent_thread_id"] == family.researcher.pk
    primary = family.api.get(family.url(family.primary)).json()
    assert primary["id"] == family.primary and primary["usage"]["input_tokens"] == 0


def test_threads_of_unknown_sessions_other_sessions_and_other_workspaces_are_404(family):
    other_session = open_session(family.api)
    foreign = make_tenant("foreign")
    cases = [
        (family.api, family.url("sthr_unknown000000000000000")),
        (family.api, family.url("sthr_unknown000000000000000", "/events")),
        (family.api, f"/v1/sessions/{other_session}/threads/{family.writer.pk}"),  # another session's thread
        (family.api, f"/v1/sessions/{other_session}/threads/{family.writer.pk}/events"),
        (family.api, f"/v1/sessions/{other_session}/threads/{family.primary}"),  # another session's primary
        (family.api, "/v1/sessions/sesn_missing000000000000/threads"),
        (family.api, family.url("thr_wrongprefix")),
        (foreign.client, family.url()),  # another workspace
        (foreign.client, family.url(family.writer.pk)),
        (foreign.client, family.url(family.primary, "/events")),
    ]
    for client, url in cases:
        assert_error(client.get(url), 404, "not_found_error")
    assert_error(foreign.client.post(family.url(family.writer.pk, "/archive")), 404, "not_found_error")
    assert SessionThread.objects.get(pk=family.writer.pk).archived_at is None


# -- archive ----------------------------------------------------------------------------------------------------
def test_archiving_a_child_terminates_it_and_it_stays_listed(family):
    thread_log.transition(thread=family.writer, status="running", fence=None)
    archived = family.api.post(family.url(family.writer.pk, "/archive"))
    assert archived.status_code == 200, archived.content
    body = archived.json()
    assert body["id"] == family.writer.pk and body["status"] == "terminated" and body["archived_at"] is not None
    again = family.api.post(family.url(family.writer.pk, "/archive")).json()
    assert again["archived_at"] == body["archived_at"] and again["status"] == "terminated"
    listed = {thread["id"]: thread for thread in family.api.get(family.url()).json()["data"]}
    assert listed[family.writer.pk]["archived_at"] == body["archived_at"]
    assert listed[family.researcher.pk]["archived_at"] is None and listed[family.researcher.pk]["status"] == "idle"
    own = [event["type"] for event in family.api.get(family.url(family.writer.pk, "/events")).json()["data"]]
    assert own[-1] == "session.thread_status_terminated"
    primary = [event["type"] for event in family.api.get(family.url(family.primary, "/events")).json()["data"]]
    assert primary[-1] == "session.thread_status_terminated"  # cross-posted to the primary thread's log
    assert family.api.get(f"/v1/sessions/{family.session_id}").json()["status"] == "idle"  # the session goes on


def test_the_primary_thread_is_archived_with_its_session_only(family):
    refused = family.api.post(family.url(family.primary, "/archive"))
    assert_error(refused, 400, "invalid_request_error", "archive the session")
    assert Session.objects.get(pk=family.session_id).archived_at is None
    services.session_archive(session=Session.objects.get(pk=family.session_id))
    primary = family.api.get(family.url(family.primary)).json()
    assert primary["status"] == "terminated" and primary["archived_at"] is not None
    assert {thread["status"] for thread in family.api.get(family.url()).json()["data"]} == {"terminated"}


# -- usage and stats --------------------------------------------------------------------------------------------
def test_a_childs_stats_and_usage_appear_once_it_ran_and_used_a_model(family):
    thread_log.transition(thread=family.writer, status="running", fence=None)
    started = family.api.get(family.url(family.writer.pk)).json()
    assert started["stats"]["startup_seconds"] == 0 and started["stats"]["duration_seconds"] >= 0
    assert started["stats"]["active_seconds"] == 0 and started["usage"] is None
    thread_log.add_usage(
        thread=family.writer, usage=USAGE, active_seconds=2.5, list_cost_usd=Decimal("0.125"), fence=None
    )
    used = family.api.get(family.url(family.writer.pk)).json()
    assert used["usage"]["input_tokens"] == 100 and used["usage"]["output_tokens"] == 20
    assert used["usage"]["cache_creation"]["ephemeral_5m_input_tokens"] == 7
    assert used["usage"]["active_seconds"] == used["stats"]["active_seconds"] == 2.5
    assert used["usage"]["list_cost"] == {"amount": "13", "currency": "USD"}  # 12.5 cents, to the nearest cent
    primary = family.api.get(family.url(family.primary)).json()  # the session's totals, which fold the thread's in
    assert primary["usage"]["input_tokens"] == 100 and primary["usage"]["list_cost"]["amount"] == "13"
    assert family.api.get(family.url(family.researcher.pk)).json()["usage"] is None


# -- events -----------------------------------------------------------------------------------------------------
def test_the_primary_threads_events_are_the_sessions(family):
    log.emit(session_id=family.session_id, type="agent.message", body={"content": TEXT})
    log.emit(session_id=family.session_id, type="span.model_request_start", body={})
    say(family.writer)  # a child's event is not the primary thread's
    for headers in ({}, {"HTTP_NATIVE_BETA": "1"}):
        for params in ({}, {"limit": 2}, {"types": "session.thread_created"}, {"order": "desc"}):
            thread = family.api.get(family.url(family.primary, "/events"), params, **headers).json()
            session = family.api.get(f"/v1/sessions/{family.session_id}/events", params, **headers).json()
            assert thread == session
    listed = family.api.get(family.url(family.primary, "/events")).json()["data"]
    assert [event["type"] for event in listed] == ["session.thread_created"] * 2 + ["agent.message"]
    assert [event["session_thread_id"] for event in listed[:2]] == [family.researcher.pk, family.writer.pk]


def test_a_childs_events_are_its_own_log_in_order(family):
    turn(family.researcher, "one", "two")
    thread_log.message(
        session_id=family.session_id,
        sender=(family.primary, None),
        receiver=(family.researcher.pk, "researcher"),
        content=[{"type": "text", "text": "go on"}],
        delivered=True,
        fence=None,
    )
    url = family.url(family.researcher.pk, "/events")
    events = family.api.get(url).json()["data"]
    assert [event["type"] for event in events] == [
        "session.thread_created",  # the checker's, in its parent's log
        "session.thread_status_running",
        "agent.message",
        "agent.message",
        "session.thread_status_idle",
        "agent.thread_message_received",
    ]
    assert [event["content"][0]["text"] for event in events if event["type"] == "agent.message"] == ["one", "two"]
    received = events[-1]
    assert received["from_session_thread_id"] == family.primary and "_delivered" not in received
    assert events[4]["stop_reason"] == {"type": "end_turn"} and "seq" not in events[0]
    native = family.api.get(url, HTTP_NATIVE_BETA="1").json()["data"]
    assert [event["seq"] for event in native] == [1, 2, 3, 4, 5, 6]
    first = family.api.get(url, {"limit": 4}).json()
    rest = family.api.get(url, {"limit": 4, "page": first["next_page"]}).json()
    assert [event["id"] for event in first["data"] + rest["data"]] == [event["id"] for event in events]
    assert rest["next_page"] is None and rest["prev_page"] is not None
    only = family.api.get(url, {"types": "agent.message"}).json()["data"]
    assert [event["id"] for event in only] == [events[2]["id"], events[3]["id"]]
    assert family.api.get(family.url(family.writer.pk, "/events")).json()["data"] == []
    sent = family.api.get(family.url(family.primary, "/events")).json()["data"][-1]
    assert sent["type"] == "agent.thread_message_sent" and sent["to_agent_name"] == "researcher"


# -- scoped credentials -----------------------------------------------------------------------------------------
def bearer(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def self_hosted(tenant: Tenant, agent_id: str) -> tuple[str, str]:
    """A self_hosted environment and a session on it."""
    api = tenant.client
    environment = api.post("/v1/environments", {"name": "sh", "config": {"type": "self_hosted"}}, format="json")
    body = {"agent": agent_id, "environment_id": environment.json()["id"]}
    return environment.json()["id"], api.post("/v1/sessions", body, format="json").json()["id"]


def test_scoped_credentials_read_the_threads_of_their_sessions_only(db):
    tenant = make_tenant("scoped")
    agent = tenant.client.post("/v1/agents", {"name": "a", "model": "m"}, format="json").json()["id"]
    env, session = self_hosted(tenant, agent)
    sibling = tenant.client.post("/v1/sessions", {"agent": agent, "environment_id": env}, format="json").json()["id"]
    _, elsewhere = self_hosted(tenant, agent)
    threads = {session_id: spawn(tenant.client, session_id, "helper") for session_id in (session, sibling, elsewhere)}
    key = bearer(environment_services.environment_key_mint(environment=Environment.objects.get(pk=env)).plaintext)
    secret_of_item = mint_work_secret(work_id="work_threads", session_id=session, environment_id=env)
    secret = bearer(str(_sessions_token_from_secret(secret_of_item)))

    def reads(client: APIClient, session_id: str) -> list[int]:
        thread = threads[session_id].pk
        paths = [
            f"/v1/sessions/{session_id}/threads",
            f"/v1/sessions/{session_id}/threads/{thread}",
            f"/v1/sessions/{session_id}/threads/{primary_thread_id(session_id)}",
            f"/v1/sessions/{session_id}/threads/{thread}/events",
        ]
        return [client.get(path).status_code for path in paths]

    assert reads(key, session) == reads(key, sibling) == [200] * 4  # its environment's sessions
    assert reads(secret, session) == [200] * 4  # its own session
    assert reads(key, elsewhere) == reads(secret, sibling) == reads(secret, elsewhere) == [403] * 4
    assert key.get(f"/v1/sessions/{session}/threads").json()["data"][1]["id"] == threads[session].pk
    for client in (key, secret):  # reading is all: archiving takes a workspace credential
        archive = client.post(f"/v1/sessions/{session}/threads/{threads[session].pk}/archive")
        assert_error(archive, 403, "permission_error")
    assert SessionThread.objects.get(pk=threads[session].pk).archived_at is None
    # The stream's own lookup follows the same scope.
    principal: Any = key.get(f"/v1/sessions/{session}").wsgi_request.user
    assert find_thread(principal, sibling, threads[sibling].pk).pk == threads[sibling].pk
    assert find_thread(principal, session, primary_thread_id(session)).pk == session
    with pytest.raises(StreamRefused) as refused:
        find_thread(principal, elsewhere, threads[elsewhere].pk)
    assert refused.value.status == 403
    with pytest.raises(StreamRefused) as refused:
        find_thread(principal, session, threads[sibling].pk)
    assert refused.value.status == 404


# -- the reference client ---------------------------------------------------------------------------------------
def test_the_reference_client_parses_every_answer(family, live_server):
    sdk = registry_client(live_server.url, family.tenant.api_key)
    turn(family.writer, "draft")
    thread_log.add_usage(thread=family.writer, usage=USAGE, active_seconds=1.0, fence=None)
    listed = list(sdk.beta.sessions.threads.list(family.session_id, limit=2))  # the client follows next_page
    assert [thread.id for thread in listed] == family.listed()
    assert all(isinstance(thread, BetaManagedAgentsSessionThread) for thread in listed)
    primary, _, writer, _ = listed
    assert primary.parent_thread_id is None and primary.agent.type == "agent" and primary.stats is not None
    assert isinstance(writer.agent, BetaManagedAgentsSessionThreadAgent) and writer.agent.name == "writer"
    assert writer.usage is not None and writer.usage.input_tokens == 100
    assert writer.stats is not None and writer.stats.startup_seconds == 0
    assert writer.usage.list_cost is not None and writer.usage.list_cost.currency == "USD"
    assert list(sdk.beta.sessions.threads.list(family.session_id, statuses=["running"])) == []
    idle = sdk.beta.sessions.threads.list(family.session_id, statuses=["idle", "terminated"])
    assert [thread.id for thread in idle] == family.listed()

    fetched = sdk.beta.sessions.threads.retrieve(family.checker.pk, session_id=family.session_id)
    assert fetched.parent_thread_id == family.researcher.pk and fetched.status == "idle"
    events = list(sdk.beta.sessions.threads.events.list(family.writer.pk, session_id=family.session_id))
    assert isinstance(events[0], BetaManagedAgentsSessionThreadStatusRunningEvent)
    assert isinstance(events[1], BetaManagedAgentsAgentMessageEvent)
    assert isinstance(events[1].content[0], BetaManagedAgentsTextBlock) and events[1].content[0].text == "draft"
    assert [event.type for event in events][-1] == "session.thread_status_idle"
    primary_events = list(sdk.beta.sessions.threads.events.list(family.primary, session_id=family.session_id))
    assert [event.type for event in primary_events] == [
        "session.thread_created",
        "session.thread_created",
        "session.thread_status_running",  # the writer's, cross-posted
        "session.thread_status_idle",
    ]

    archived = sdk.beta.sessions.threads.archive(family.writer.pk, session_id=family.session_id)
    assert isinstance(archived, BetaManagedAgentsSessionThread) and archived.archived_at is not None
    assert archived.status == "terminated"
    with pytest.raises(anthropic.BadRequestError):
        sdk.beta.sessions.threads.archive(family.primary, session_id=family.session_id)
    with pytest.raises(anthropic.NotFoundError):
        sdk.beta.sessions.threads.retrieve("sthr_unknown000000000000000", session_id=family.session_id)


# -- the streams ------------------------------------------------------------------------------------------------
def stream_url(url: str, family: Family, thread_id: str) -> str:
    return f"{url}/v1/sessions/{family.session_id}/threads/{thread_id}/stream"


def read_to_end(url: str, headers: dict[str, str], params: dict[str, str] | None = None) -> list[Frame]:
    """The frames of a stream read until the server ends it (keepalives would hold a stream that does not end
    open: it fails after `STREAM_SECONDS`)."""
    deadline = time.monotonic() + STREAM_SECONDS
    text = ""
    with httpx.Client(timeout=30) as client, client.stream("GET", url, headers=headers, params=params) as response:
        assert response.status_code == 200
        for chunk in response.iter_text():
            text += chunk
            assert time.monotonic() < deadline, f"the stream did not end: {text[-300:]}"
    return parse_frames(text)[0]


def read_to(url: str, headers: dict[str, str], terminal: str, params: dict[str, str] | None = None) -> list[Frame]:
    """The frames of a stream read until it ends, which is right after its `terminal` event."""
    frames = read_to_end(url, headers, params)
    assert frames[-1].event == terminal
    return frames


def in_thread(action: Any) -> threading.Thread:
    """Run `action` on another thread, closing that thread's database connection."""

    def run() -> None:
        try:
            action()
        finally:
            connection.close()

    runner = threading.Thread(target=run)
    runner.start()
    return runner


def test_a_child_stream_resumes_from_last_event_id_without_loss_or_repeat(family):
    for _ in range(5):
        say(family.writer)  # before any stream: replayed from the cursor

    def write() -> None:
        rng = random.Random(7)
        thread_log.transition(thread=family.writer, status="running", fence=None)
        for count in range(60):
            say(family.writer, str(count))
            if count % 3 == 0:  # the session's log and the other threads' grow too
                log.emit(session_id=family.session_id, type="agent.message", body={"content": TEXT})
                say(family.researcher)
            time.sleep(rng.uniform(0.005, 0.02))
        thread_log.transition(thread=family.writer, status="terminated", fence=None)

    async def readers(url: str, opened: threading.Semaphore) -> list[list[int]]:
        return await asyncio.gather(
            *(
                resuming_reader(
                    url, family.tenant.api_key, random.Random(seed), opened, "session.thread_status_terminated"
                )
                for seed in range(READERS)
            )
        )

    results: list[list[list[int]]] = []
    with live_registry(**FAST) as url:
        opened = threading.Semaphore(0)
        url = stream_url(url, family, family.writer.pk)
        reading = threading.Thread(target=lambda: results.append(asyncio.run(readers(url, opened))))
        reading.start()
        for _ in range(READERS):
            assert opened.acquire(timeout=60), "a stream did not open"
        in_thread(write).join()
        reading.join(timeout=120)
    assert results, "the readers did not finish"
    written = SessionThread.objects.get(pk=family.writer.pk).last_seq
    assert written == 5 + 1 + 60 + 1
    for received in results[0]:
        assert received == list(range(1, written + 1))  # 0 lost, 0 repeated, in order, the thread's own seq


def test_a_child_stream_ends_at_its_terminated_event_and_the_reference_client_reads_it(family):
    turn(family.writer, "draft")
    thread_log.message(
        session_id=family.session_id,
        sender=(family.primary, None),
        receiver=(family.writer.pk, "writer"),
        content=TEXT,
        delivered=False,
        fence=None,
    )
    thread_log.transition(thread=family.writer, status="terminated", fence=None)
    with live_registry(**FAST) as url:
        headers = {"x-api-key": family.tenant.api_key}
        frames = read_to(
            stream_url(url, family, family.writer.pk),
            {**headers, "Last-Event-ID": "2"},
            "session.thread_status_terminated",
        )
        assert [(frame.id, frame.event) for frame in frames] == [
            (2, "agent.message"),
            (3, "session.thread_status_idle"),
            (4, "agent.thread_message_received"),
            (5, "session.thread_status_terminated"),
        ]
        assert frames[-1].data["session_thread_id"] == family.writer.pk and "seq" not in frames[-1].data

        sdk = registry_client(url, family.tenant.api_key)
        stream = sdk.beta.sessions.threads.events.stream(
            family.writer.pk, session_id=family.session_id, extra_headers={"Last-Event-ID": "1"}
        )
        with stream:
            events = list(stream)  # the iteration ends: the server closed the stream after the terminal event
        assert isinstance(events[0], BetaManagedAgentsSessionThreadStatusRunningEvent)
        assert isinstance(events[-2], BetaManagedAgentsAgentThreadMessageReceivedEvent)
        assert isinstance(events[-1], BetaManagedAgentsSessionThreadStatusTerminatedEvent)
        assert len(events) == 5


def test_a_child_stream_ends_when_its_session_does(family):
    say(family.writer)
    services.session_archive(session=Session.objects.get(pk=family.session_id))
    with live_registry(**FAST) as url:
        headers = {"x-api-key": family.tenant.api_key, "Last-Event-ID": "1"}
        frames = read_to_end(stream_url(url, family, family.writer.pk), headers)
    # The session's end terminated the thread, which its log says last.
    assert [(frame.id, frame.event) for frame in frames] == [
        (1, "agent.message"),
        (2, "session.thread_status_terminated"),
    ]


def test_the_primary_threads_stream_is_the_sessions(family):
    log.emit(session_id=family.session_id, type="agent.message", body={"content": TEXT})
    say(family.writer)

    def later() -> None:
        time.sleep(1.0)
        turn(family.writer, "live")  # cross-posted: running, idle
        log.emit(session_id=family.session_id, type="span.model_request_start", body={})
        services.session_archive(session=Session.objects.get(pk=family.session_id))

    with live_registry(**FAST) as url:
        headers = {"x-api-key": family.tenant.api_key, "Last-Event-ID": "2", "native-beta": "1"}
        session_url = f"{url}/v1/sessions/{family.session_id}/events/stream"
        results: dict[str, list[Frame]] = {}
        readers = [
            threading.Thread(target=lambda: results.update(session=read_to(session_url, headers, TERMINATED))),
            threading.Thread(
                target=lambda: results.update(
                    thread=read_to(stream_url(url, family, family.primary), headers, TERMINATED)
                )
            ),
        ]
        for reader in readers:
            reader.start()
        in_thread(later).join()
        for reader in readers:
            reader.join(timeout=60)
    assert results["thread"] == results["session"]
    assert [(frame.id, frame.event) for frame in results["session"]] == [
        (2, "session.thread_created"),
        (3, "agent.message"),
        (4, "session.thread_status_running"),
        (5, "session.thread_status_idle"),
        (6, "span.model_request_start"),
        *[(seq, "session.thread_status_terminated") for seq in (7, 8, 9)],  # its three threads end with it
        (10, "session.status_terminated"),
    ]


def test_previews_reach_the_streams_of_their_own_thread_only(family):
    start = {"type": "event_start", "event": {"type": "agent.message", "id": "sevt_previewofthechild000000"}}
    primary_start = {"type": "event_start", "event": {"type": "agent.message", "id": "sevt_previewoftheprimary0000"}}

    def produce() -> None:
        time.sleep(1.0)
        notify.publish_delta(family.session_id, "agent.message", start, family.writer.pk)
        notify.publish_delta(family.session_id, "agent.message", primary_start)
        notify.publish_delta(family.session_id, "agent.message", {**start, "marker": "x"}, family.researcher.pk)
        say(family.writer)
        thread_log.transition(thread=family.writer, status="terminated", fence=None)
        services.session_archive(session=Session.objects.get(pk=family.session_id))

    with live_registry(**FAST) as url:
        headers = {"x-api-key": family.tenant.api_key}
        deltas = {"event_deltas": "agent.message"}
        results: dict[str, list[Frame]] = {}
        child_url, session_url = stream_url(url, family, family.writer.pk), stream_url(url, family, family.primary)
        readers = [
            threading.Thread(
                target=lambda: results.update(
                    child=read_to(child_url, headers, "session.thread_status_terminated", deltas)
                )
            ),
            threading.Thread(target=lambda: results.update(session=read_to(session_url, headers, TERMINATED, deltas))),
        ]
        for reader in readers:
            reader.start()
        in_thread(produce).join()
        for reader in readers:
            reader.join(timeout=60)
    child = [(frame.event, frame.data.get("event", {}).get("id")) for frame in results["child"]]
    assert child[0] == ("event_start", "sevt_previewofthechild000000")
    assert [event for event, _ in child[1:]] == ["agent.message", "session.thread_status_terminated"]
    assert "marker" not in str(results["child"])
    session = [(frame.event, frame.data.get("event", {}).get("id")) for frame in results["session"]]
    assert ("event_start", "sevt_previewoftheprimary0000") in session
    assert not any(event_id == "sevt_previewofthechild000000" for _, event_id in session)


def test_stream_refusals_are_json_errors(family):
    other_session = open_session(family.api)
    foreign = make_tenant("foreign")
    with live_registry(**FAST) as url, httpx.Client(base_url=url, timeout=10) as client:
        own = {"x-api-key": family.tenant.api_key}
        cases = [
            (family.url("sthr_unknown000000000000000", "/stream"), own, {}, 404, "not_found_error"),
            (f"/v1/sessions/{other_session}/threads/{family.writer.pk}/stream", own, {}, 404, "not_found_error"),
            (family.url(family.writer.pk, "/stream"), {"x-api-key": foreign.api_key}, {}, 404, "not_found_error"),
            (family.url(family.writer.pk, "/stream"), {}, {}, 401, "authentication_error"),
            (family.url(family.writer.pk, "/stream"), own, {"from_cursor": "x"}, 400, "invalid_request_error"),
            (family.url(family.writer.pk, "/stream"), own, {"event_deltas": "nope"}, 400, "invalid_request_error"),
        ]
        for path, headers, params, status, error_type in cases:
            response = client.get(path, headers=headers, params=params)
            assert response.status_code == status, path
            assert response.json()["error"]["type"] == error_type
            assert response.json()["request_id"] == response.headers["request-id"]


def test_the_cases_without_a_live_server_also_hold_on_sqlite(tmp_path: Path) -> None:
    """The threads' log (its one-statement seq) and the API on `make run`'s database, in a child pytest."""
    assert connection.vendor == "postgresql"  # the suite's own run is the PostgreSQL half
    rerun_on_sqlite(__file__, tmp_path, selection="not stream and not reference_client and not sqlite", passed=15)
