"""The work queue of self-hosted environments through the reference client: queueing, long polls, acks,
heartbeats under optimistic concurrency, leases, stops, metadata, lists, stats and tenancy.

Every case runs on PostgreSQL (the suite's database); `test_poll_also_works_on_sqlite` runs the cases not
named `..._postgresql` again in a child pytest whose database is SQLite.
"""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import time
from pathlib import Path
from typing import Any

import anthropic
import pytest
from django.db import connection

from registry.core.observability import exposition
from registry.environments.models import Environment
from registry.runtime.worker import WORK_ITEMS_LIVE, WORK_QUEUE_DEPTH
from registry.sessions import log
from registry.workspaces.scoped_credentials import environment_key_issue
from tests.support.clients import registry_client
from tests.support.sqlite_rerun import rerun_on_sqlite
from tests.support.tenants import make_tenant

pytestmark = pytest.mark.django_db(transaction=True)


class Queue:
    """A workspace's SDK client with an agent and a self-hosted environment."""

    def __init__(self, url: str, name: str = "work") -> None:
        tenant = make_tenant(name)
        self.url = url
        self.api_key = tenant.api_key
        self.sdk = registry_client(url, tenant.api_key)
        self.agent = self.sdk.beta.agents.create(name="a", model="m")
        self.environment = self.sdk.beta.environments.create(name="hosted", config={"type": "self_hosted"})
        self.work = self.sdk.beta.environments.work

    def session(self) -> Any:
        return self.sdk.beta.sessions.create(agent=self.agent.id, environment_id=self.environment.id)

    def poll(self, **options: Any) -> Any:
        return self.work.poll(self.environment.id, **options)

    def claim(self) -> Any:
        """A session, polled and acked."""
        session = self.session()
        item = self.poll()
        assert item is not None and item.data.id == session.id
        self.work.ack(item.id, environment_id=self.environment.id)
        return item


@pytest.fixture
def queue(live_server: Any) -> Queue:
    return Queue(live_server.url)


def test_a_self_hosted_session_is_queued_and_polled(queue: Queue) -> None:
    session = queue.session()
    [item] = list(queue.work.list(queue.environment.id))
    assert item.state == "queued" and item.type == "work" and item.secret is None
    assert item.data.id == session.id and item.data.type == "session"
    assert item.environment_id == queue.environment.id and item.id.startswith("work_")
    polled = queue.poll(block_ms=500)
    assert polled is not None and polled.id == item.id and polled.state == "queued"
    assert polled.secret  # only a poll carries it
    assert queue.work.retrieve(item.id, environment_id=queue.environment.id).secret is None
    assert queue.poll() is None  # handed out, not reclaimable yet


def test_a_cloud_session_queues_nothing(queue: Queue) -> None:
    cloud = queue.sdk.beta.environments.create(name="cloud")
    queue.sdk.beta.sessions.create(agent=queue.agent.id, environment_id=cloud.id)
    assert list(queue.work.list(cloud.id)) == []
    assert queue.work.poll(cloud.id) is None


def test_an_empty_poll_is_null_after_block_ms(queue: Queue) -> None:
    raw = queue.work.with_raw_response.poll(queue.environment.id, block_ms=200)
    assert raw.status_code == 200 and raw.http_response.text == "null"
    started = time.monotonic()
    assert queue.poll(block_ms=300) is None
    assert 0.25 <= time.monotonic() - started < 2


def test_a_long_poll_answers_an_item_queued_while_it_waits(queue: Queue) -> None:
    answer: dict[str, Any] = {}

    def poll() -> None:
        started = time.monotonic()
        answer["item"] = queue.poll(block_ms=999)
        answer["seconds"] = time.monotonic() - started

    poller = threading.Thread(target=poll)
    poller.start()
    time.sleep(0.25)
    queued_at = time.monotonic()
    session = queue.session()
    poller.join(5)
    assert answer["item"] is not None and answer["item"].data.id == session.id
    if connection.vendor == "postgresql":  # woken by NOTIFY, not by the end of block_ms
        assert time.monotonic() - queued_at < 0.6 and answer["seconds"] < 0.9


def test_long_polls_share_one_listen_connection_on_postgresql(queue: Queue) -> None:
    answers: list[Any] = []
    pollers = [threading.Thread(target=lambda: answers.append(queue.poll(block_ms=999))) for _ in range(4)]
    for poller in pollers:
        poller.start()
    time.sleep(0.4)  # all four are waiting
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query = %s",
            ["LISTEN registry_work"],
        )
        (listening,) = cursor.fetchone()
    session = queue.session()
    for poller in pollers:
        poller.join(5)
    assert listening == 1  # one per process, not one per poll
    assert [item.data.id for item in answers if item is not None] == [session.id]  # exactly one poll got it


def test_ack_and_heartbeats_under_optimistic_concurrency(queue: Queue) -> None:
    session = queue.session()
    item = queue.poll()
    acked = queue.work.ack(item.id, environment_id=queue.environment.id)
    assert acked.state == "starting" and acked.acknowledged_at is not None
    with pytest.raises(anthropic.ConflictError):
        queue.work.ack(item.id, environment_id=queue.environment.id)
    first = queue.work.heartbeat(item.id, environment_id=queue.environment.id, expected_last_heartbeat="NO_HEARTBEAT")
    assert first.type == "work_heartbeat" and first.state == "active" and first.lease_extended
    assert first.last_heartbeat and first.ttl_seconds == 60  # REGISTRY_WORK_LEASE_SECONDS's default
    second = queue.work.heartbeat(
        item.id,
        environment_id=queue.environment.id,
        expected_last_heartbeat=first.last_heartbeat,
        desired_ttl_seconds=30,
    )
    assert second.lease_extended and second.ttl_seconds == 30 and second.last_heartbeat != first.last_heartbeat
    with pytest.raises(anthropic.PreconditionFailedError) as refused:
        queue.work.heartbeat(item.id, environment_id=queue.environment.id, expected_last_heartbeat=first.last_heartbeat)
    body: Any = refused.value.body
    error = body["error"]
    assert refused.value.status_code == 412 and error["error_code"] == "heartbeat_precondition_failed"
    assert error["details"]["current_state"] == {
        "last_heartbeat": second.last_heartbeat,
        "lease_extended": False,
        "state": "active",
        "ttl_seconds": 30,
    }
    retrieved = queue.work.retrieve(item.id, environment_id=queue.environment.id)
    assert retrieved.state == "active" and retrieved.started_at is not None
    assert retrieved.latest_heartbeat_at is not None and retrieved.data.id == session.id


def test_a_lapsed_lease_is_claimable_by_another_worker(queue: Queue) -> None:
    item = queue.claim()
    beat = queue.work.heartbeat(
        item.id, environment_id=queue.environment.id, expected_last_heartbeat="NO_HEARTBEAT", desired_ttl_seconds=1
    )
    assert queue.poll(anthropic_worker_id="second") is None  # the lease still holds
    time.sleep(1.2)
    again = queue.poll(anthropic_worker_id="second")
    assert again is not None and again.id == item.id and again.state == "queued"
    with pytest.raises(anthropic.PreconditionFailedError):  # the first worker has lost it
        queue.work.heartbeat(item.id, environment_id=queue.environment.id, expected_last_heartbeat=beat.last_heartbeat)
    with pytest.raises(anthropic.AuthenticationError):  # and its secret with it
        bearer_client(queue.url, sessions_token(item.secret)).beta.environments.work.heartbeat(
            item.id, environment_id=queue.environment.id
        )
    queue.work.ack(item.id, environment_id=queue.environment.id)
    taken = queue.work.heartbeat(item.id, environment_id=queue.environment.id, expected_last_heartbeat="NO_HEARTBEAT")
    assert taken.lease_extended and taken.state == "active"


def test_an_item_polled_but_never_acked_is_reclaimed(queue: Queue) -> None:
    session = queue.session()
    assert queue.poll().data.id == session.id
    assert queue.poll() is None  # the default reclaim is 5 s
    time.sleep(0.15)
    assert queue.poll(reclaim_older_than_ms=100).data.id == session.id


def test_a_graceful_stop_is_seen_at_the_next_heartbeat(queue: Queue) -> None:
    item = queue.claim()
    beat = queue.work.heartbeat(item.id, environment_id=queue.environment.id, expected_last_heartbeat="NO_HEARTBEAT")
    stopping = queue.work.stop(item.id, environment_id=queue.environment.id)
    assert stopping.state == "stopping" and stopping.stop_requested_at is not None and stopping.stopped_at is None
    seen = queue.work.heartbeat(item.id, environment_id=queue.environment.id, expected_last_heartbeat="stale")
    assert seen.state == "stopping"  # not compared while stopping
    assert beat.last_heartbeat
    stopped = queue.work.stop(item.id, environment_id=queue.environment.id)  # the worker's own stop when done
    assert stopped.state == "stopped" and stopped.stopped_at is not None
    with pytest.raises(anthropic.ConflictError):
        queue.work.stop(item.id, environment_id=queue.environment.id)
    final = queue.work.heartbeat(item.id, environment_id=queue.environment.id, expected_last_heartbeat="stale")
    assert final.state == "stopped" and not final.lease_extended


def test_a_forced_stop_stops_at_once(queue: Queue) -> None:
    item = queue.claim()
    stopped = queue.work.stop(item.id, environment_id=queue.environment.id, force=True)
    assert stopped.state == "stopped" and stopped.stopped_at is not None


def test_update_merges_metadata(queue: Queue) -> None:
    queue.session()
    [item] = list(queue.work.list(queue.environment.id))
    queue.work.update(item.id, environment_id=queue.environment.id, metadata={"a": "1", "b": "2"})
    updated = queue.work.update(item.id, environment_id=queue.environment.id, metadata={"a": None, "c": "3"})
    assert updated.metadata == {"b": "2", "c": "3"}
    assert queue.work.retrieve(item.id, environment_id=queue.environment.id).metadata == {"b": "2", "c": "3"}
    with pytest.raises(anthropic.BadRequestError):
        queue.work.update(item.id, environment_id=queue.environment.id, metadata={"x": "y" * 600})


def test_list_pages_and_stats(queue: Queue) -> None:
    sessions = [queue.session() for _ in range(3)]
    page = queue.work.list(queue.environment.id, limit=2)
    assert len(page.data) == 2 and page.next_page
    assert [item.data.id for item in queue.work.list(queue.environment.id)] == [s.id for s in reversed(sessions)]
    stats = queue.work.stats(queue.environment.id)
    assert (stats.type, stats.depth, stats.pending, stats.workers_polling) == ("work_queue_stats", 3, 0, 0)
    first = queue.work.list(queue.environment.id).data[-1]
    assert stats.oldest_queued_at == first.created_at
    queue.poll(anthropic_worker_id="w1")
    queue.poll(anthropic_worker_id="w2")
    queue.poll(anthropic_worker_id="w1")
    stats = queue.work.stats(queue.environment.id)
    assert (stats.depth, stats.pending, stats.workers_polling) == (0, 3, 2)


def test_archiving_the_session_stops_its_item(queue: Queue) -> None:
    queued_session = queue.session()
    queue.sdk.beta.sessions.archive(queued_session.id)
    [stopped] = [item for item in queue.work.list(queue.environment.id) if item.data.id == queued_session.id]
    assert stopped.state == "stopped"
    item = queue.claim()
    queue.sdk.beta.sessions.archive(item.data.id)
    seen = queue.work.heartbeat(item.id, environment_id=queue.environment.id, expected_last_heartbeat="NO_HEARTBEAT")
    assert seen.state == "stopping"


def test_deleting_the_session_stops_its_item(queue: Queue) -> None:
    session = queue.session()
    queue.sdk.beta.sessions.delete(session.id)
    [item] = list(queue.work.list(queue.environment.id))
    assert item.state == "stopped" and item.data.id == session.id


def test_new_input_for_a_dormant_session_queues_it_again(queue: Queue) -> None:
    item = queue.claim()
    session_id = item.data.id
    message: Any = {"type": "user.message", "content": [{"type": "text", "text": "hi"}]}
    queue.sdk.beta.sessions.events.send(session_id, events=[message])
    assert len(list(queue.work.list(queue.environment.id))) == 1  # its worker still holds it
    queue.work.stop(item.id, environment_id=queue.environment.id, force=True)
    queue.sdk.beta.sessions.events.send(session_id, events=[message])
    items = list(queue.work.list(queue.environment.id))
    assert [work.state for work in items] == ["queued", "stopped"] and items[0].data.id == session_id
    assert queue.poll().id == items[0].id


def test_an_item_stopped_with_calls_left_open_is_queued_again(queue: Queue) -> None:
    item = queue.claim()
    session_id = item.data.id
    call = log.emit(session_id=session_id, type="agent.tool_use", body={"name": "bash", "input": {}})
    queue.work.stop(item.id, environment_id=queue.environment.id, force=True)  # its worker shut down
    again = queue.poll()
    assert again is not None and again.data.id == session_id and again.id != item.id
    queue.work.ack(again.id, environment_id=queue.environment.id)
    result: Any = {"type": "user.tool_result", "tool_use_id": call.id, "content": [{"type": "text", "text": "ok"}]}
    queue.sdk.beta.sessions.events.send(session_id, events=[result])
    held = {"name": "bash", "input": {}, "evaluated_permission": "ask"}  # waits for the user, not a worker
    log.emit(session_id=session_id, type="agent.tool_use", body=held)
    queue.work.stop(again.id, environment_id=queue.environment.id, force=True)
    assert [work.state for work in queue.work.list(queue.environment.id)] == ["stopped", "stopped"]


def test_a_self_hosted_session_runs_on_a_worker_and_mounts_no_files(queue: Queue) -> None:
    session = queue.session()
    raw = queue.sdk.get(f"/v1/sessions/{session.id}", cast_to=object)
    assert raw["harness"] == {"type": "agent_sdk_harness", "mode": "separate"}  # type: ignore[index]
    repository: Any = {"type": "github_repository", "url": "https://github.com/example/app", "authorization_token": "t"}
    for attempt in (
        lambda: queue.sdk.beta.sessions.create(
            agent=queue.agent.id, environment_id=queue.environment.id, resources=[repository]
        ),
        lambda: queue.sdk.post(f"/v1/sessions/{session.id}/resources", body=repository, cast_to=object),
    ):
        with pytest.raises(anthropic.BadRequestError, match="self_hosted_resources_unsupported"):
            attempt()
    # An explicit harness that is not the client-run one leaves the tools to this runtime: nothing is queued.
    queue.sdk.beta.sessions.create(
        agent=queue.agent.id, environment_id=queue.environment.id, extra_body={"harness": {"type": "default"}}
    )
    assert len(list(queue.work.list(queue.environment.id))) == 1


def test_the_queue_gauges_count_per_environment(queue: Queue) -> None:
    queue.claim()
    queue.session()
    queue.session()
    scraped = exposition(WORK_QUEUE_DEPTH, WORK_ITEMS_LIVE).decode()
    labels = f'{{environment_id="{queue.environment.id}"}}'
    assert f"registry_work_queue_depth{labels} 2.0" in scraped
    assert f"registry_work_items_live{labels} 3.0" in scraped


def test_another_workspace_sees_none_of_it(queue: Queue, live_server: Any) -> None:
    item = queue.claim()
    other = registry_client(live_server.url, make_tenant("other").api_key).beta.environments.work
    environment_id = queue.environment.id
    calls = [
        lambda: other.poll(environment_id),
        lambda: other.list(environment_id),
        lambda: other.stats(environment_id),
        lambda: other.retrieve(item.id, environment_id=environment_id),
        lambda: other.ack(item.id, environment_id=environment_id),
        lambda: other.heartbeat(item.id, environment_id=environment_id, expected_last_heartbeat="NO_HEARTBEAT"),
        lambda: other.stop(item.id, environment_id=environment_id, force=True),
        lambda: other.update(item.id, environment_id=environment_id, metadata={"a": "b"}),
    ]
    for call in calls:
        with pytest.raises(anthropic.NotFoundError):
            call()
    assert queue.work.retrieve(item.id, environment_id=environment_id).state == "starting"


def bearer_client(url: str, token: str) -> Any:
    """The reference client as an environment worker sends it: a Bearer token, no workspace key."""
    return anthropic.Anthropic(base_url=url, api_key=None, auth_token=token, max_retries=0, timeout=30)


def sessions_token(secret: str) -> str:
    payload = json.loads(base64.urlsafe_b64decode(secret + "=" * (-len(secret) % 4)))
    return str(payload["sessions_token"])


def test_an_environment_key_and_a_work_secret_reach_only_their_own(queue: Queue, live_server: Any) -> None:
    environment = Environment.objects.get(pk=queue.environment.id)
    key = environment_key_issue(workspace=environment.workspace, environment_id=environment.pk).plaintext
    worker = bearer_client(live_server.url, key).beta.environments.work
    environment_id = queue.environment.id
    session = queue.session()
    item = worker.poll(environment_id, block_ms=100)
    assert item is not None and item.data.id == session.id and item.secret
    worker.ack(item.id, environment_id=environment_id)
    assert [listed.id for listed in worker.list(environment_id)] == [item.id]
    assert worker.stats(environment_id).pending == 0
    with pytest.raises(anthropic.PermissionDeniedError):  # the workspace key's calls only
        worker.retrieve(item.id, environment_id=environment_id)
    other = queue.sdk.beta.environments.create(name="other", config={"type": "self_hosted"})
    with pytest.raises(anthropic.NotFoundError):
        worker.poll(other.id)

    token = sessions_token(item.secret)
    own = bearer_client(live_server.url, token).beta.environments.work
    beat = own.heartbeat(item.id, environment_id=environment_id, expected_last_heartbeat="NO_HEARTBEAT")
    assert beat.state == "active"
    with pytest.raises(anthropic.PermissionDeniedError):
        own.poll(environment_id)
    second = queue.session()
    [other_item] = [listed for listed in queue.work.list(environment_id) if listed.data.id == second.id]
    with pytest.raises(anthropic.NotFoundError):
        own.stop(other_item.id, environment_id=environment_id, force=True)
    assert own.stop(item.id, environment_id=environment_id, force=True).state == "stopped"
    with pytest.raises(anthropic.AuthenticationError):  # revoked with the stop
        own.heartbeat(item.id, environment_id=environment_id, expected_last_heartbeat="NO_HEARTBEAT")


def test_the_reference_pollers_drain(queue: Queue) -> None:
    """`work.poller` (async, environment key): polls, acks, hands out, and stops each item when done."""
    environment = Environment.objects.get(pk=queue.environment.id)
    key = environment_key_issue(workspace=environment.workspace, environment_id=environment.pk).plaintext
    sessions = {queue.session().id for _ in range(2)}

    async def drain() -> list[Any]:
        async with anthropic.AsyncAnthropic(base_url=queue.url, api_key=None, auth_token=key, max_retries=0) as client:
            poller = client.beta.environments.work.poller(
                environment_id=queue.environment.id, environment_key=key, drain=True, block_ms=100
            )
            return [item async for item in poller]

    drained = asyncio.run(drain())
    assert {item.data.id for item in drained} == sessions
    assert {item.state for item in queue.work.list(queue.environment.id)} == {"stopped"}


def test_bad_parameters_are_400(queue: Queue) -> None:
    for options in ({"block_ms": 1000}, {"block_ms": 0}, {"reclaim_older_than_ms": -1}):
        with pytest.raises(anthropic.BadRequestError):
            queue.poll(**options)
    item = queue.claim()
    with pytest.raises(anthropic.BadRequestError):
        queue.work.heartbeat(item.id, environment_id=queue.environment.id, desired_ttl_seconds=0)


def test_poll_also_works_on_sqlite(tmp_path: Path) -> None:
    """The cases above, again, in a child pytest whose database is SQLite."""
    assert connection.vendor == "postgresql"  # the suite's own run is the PostgreSQL half
    rerun_on_sqlite(__file__, tmp_path, selection="not sqlite and not on_postgresql", passed=21)
