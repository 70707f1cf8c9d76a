"""Issue 17 item 7: the product proven as a fleet on one machine.

PostgreSQL and Redis on loopback; 2 registries behind nginx; 2 runtime workers; 2 trigger schedulers;
2 gateways (`--database`) behind the same nginx; the workers' model calls go through it to an echo model.
While 20 triggers fire every minute for 3 minutes, a client through the balancer creates agents and
sessions and streams events as one registry is killed, then one worker mid-turn, then (after an admin
write that must reach the other gateway in 2 s while traffic flows) one gateway.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import pytest
import yaml
from django.core.management import call_command

from fakes.waiting import wait_until
from registry.sessions.models import Session, SessionEvent
from registry.triggers.models import TriggerFire
from tests.support.fleet.children import SLOW_PREFIX, EchoModel
from tests.support.fleet.cluster import (
    MODEL,
    Fleet,
    RegistryClient,
    StreamReader,
    Traffic,
    gateway_document,
    running_fleet,
)
from tests.support.tenants import make_tenant

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True), pytest.mark.timeout(540)]

TRIGGERS = 20
TICKS = 3
STREAMS = 4
CONVERGENCE_SECONDS = 2.0


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    model = EchoModel()
    try:
        stored = tmp_path / "gateway.yaml"
        stored.write_text(yaml.safe_dump(gateway_document(model.url)))
        call_command("gateway", "import", str(stored))
        with running_fleet(tmp_path, dict(os.environ), model) as running:
            yield running
    finally:
        model.stop()


def idle_count(events: list[dict]) -> int:
    return sum(event["type"] == "session.status_idle" for event in events)


def test_the_fleet_keeps_every_client_whole(fleet: Fleet) -> None:
    tenant = make_tenant("fleet")
    client = RegistryClient(fleet.registry_url, tenant.api_key)
    try:
        agent = client.post("/v1/agents", {"name": "fleet", "model": MODEL})
        environment = client.post("/v1/environments", {"name": "fleet"})
        triggers = [
            client.post(
                "/v1/triggers",
                {
                    "name": f"tick-{index}",
                    "agent": agent["id"],
                    "source": {"type": "cron", "schedule": "* * * * *", "payload": f"tick {index}"},
                    "session": {"environment_id": environment["id"]},
                },
            )
            for index in range(TRIGGERS)
        ]

        def new_session() -> str:
            return str(client.post("/v1/sessions", {"agent": agent["id"], "environment_id": environment["id"]})["id"])

        streams_survive_a_registry_kill(fleet, client, tenant.api_key, new_session)
        a_turn_survives_its_worker_kill(fleet, client, new_session())
        gateways_converge_and_survive_a_kill(fleet, client, new_session())
        each_tick_starts_exactly_one_session(fleet, triggers)
    except BaseException:
        print(fleet.tails())
        raise
    finally:
        client.close()


def streams_survive_a_registry_kill(fleet: Fleet, client: RegistryClient, api_key: str, new_session) -> None:  # type: ignore[no-untyped-def]
    sessions = [new_session() for _ in range(STREAMS)]
    readers = [StreamReader(fleet.registry_url, api_key, session, idles=2) for session in sessions]
    for reader in readers:
        reader.start()
    wait_until(lambda: all(reader.upstreams for reader in readers), what="every stream to open")
    for session in sessions:
        client.say(session, f"first turn of {session}")
    wait_until(lambda: all(reader.idle_count() >= 1 for reader in readers), timeout=60, what="the first turns")
    victim = fleet.registry_on(readers[0].upstreams[0])
    victim.kill()
    for session in sessions:
        client.say(session, f"second turn of {session}")
    for reader in readers:
        reader.join(timeout=90)
        assert reader.failure is None and not reader.is_alive(), (reader.failure, reader.drops)
    assert len(readers[0].upstreams) >= 2 and readers[0].upstreams[-1] != readers[0].upstreams[0]
    for session, reader in zip(sessions, readers, strict=True):
        listed = client.events(session)
        seqs = [frame.seq for frame in reader.frames]
        assert seqs == sorted(set(seqs)), f"{session}: seqs repeated or out of order {seqs}"
        assert [frame.event_id for frame in reader.frames] == [event["id"] for event in listed][: len(reader.frames)]
        answers = [frame for frame in reader.frames if frame.type == "agent.message"]
        assert len(answers) == 2, reader.frames


def a_turn_survives_its_worker_kill(fleet: Fleet, client: RegistryClient, session_id: str) -> None:
    words = f"{SLOW_PREFIX} held turn of {session_id}"
    client.say(session_id, words)
    wait_until(lambda: fleet.model.asked[words] == 1, timeout=30, what="the held model call")
    owner = Session.objects.get(pk=session_id).lease_owner
    assert owner, "the session in flight has no lease owner"
    holder = fleet.worker_with_pid(int(owner.split(":")[1]))
    holder.kill()
    events = wait_until(
        lambda: idle_count(found := client.events(session_id)) >= 1 and found, timeout=60, what="the takeover"
    )
    assert fleet.model.asked[words] == 2  # the killed call, then the survivor's
    answers = [event for event in events if event["type"] == "agent.message"]
    assert [block["text"] for answer in answers for block in answer["content"]] == [f"echo: {words}"]
    rows = list(SessionEvent.objects.filter(session_id=session_id).values_list("id", "seq"))
    seqs = [seq for _, seq in rows if seq is not None]
    assert len({event_id for event_id, _ in rows}) == len(rows) and len(set(seqs)) == len(seqs)


def gateways_converge_and_survive_a_kill(fleet: Fleet, client: RegistryClient, session_id: str) -> None:
    first, second = fleet.gateways
    probe = {"model": "claude-converge", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
    traffic = Traffic(fleet.gateway_url)
    traffic.start()
    try:
        assert httpx.post(f"{second.url}/v1/messages", json=probe).status_code == 404
        route = {
            "match": {"model": "claude-converge"},
            "strategy": {"mode": "fallback", "targets": [{"destination": "model"}]},
        }
        written = httpx.put(f"{first.admin_url}/admin/v1/routes/converge", json=route)
        assert written.status_code == 200, written.text
        started = time.monotonic()
        wait_until(
            lambda: httpx.post(f"{second.url}/v1/messages", json=probe).status_code == 200,
            timeout=10,
            what="the admin write on the other gateway",
        )
        converged = time.monotonic() - started
        assert converged <= CONVERGENCE_SECONDS, converged
        before_kill = len(traffic.outcomes)
        second.child.kill()
        wait_until(lambda: len(traffic.outcomes) > before_kill + 200, timeout=30, what="traffic after the kill")
        client.say(session_id, "a turn after the gateway kill")
        wait_until(lambda: idle_count(client.events(session_id)) >= 1, timeout=60, what="a turn through one gateway")
    finally:
        traffic.halt.set()
        traffic.join(timeout=30)
    assert before_kill > 0
    assert Counter(traffic.outcomes) == {200: len(traffic.outcomes)}, Counter(traffic.outcomes)
    print(f"gateway convergence {converged:.2f} s; {len(traffic.outcomes)} model calls, none failed")


def each_tick_starts_exactly_one_session(fleet: Fleet, triggers: list[dict]) -> None:
    firsts = {trigger["id"]: datetime.fromisoformat(trigger["next_fire_at"]) for trigger in triggers}
    expected = {
        (trigger, first + timedelta(minutes=tick)) for trigger, first in firsts.items() for tick in range(TICKS)
    }
    last_tick = max(firsts.values()) + timedelta(minutes=TICKS - 1)
    mine = TriggerFire.objects.filter(trigger_id__in=list(firsts), fire_at__lte=last_tick)
    remaining = (last_tick - datetime.now(last_tick.tzinfo)).total_seconds()
    wait_until(
        lambda: mine.filter(session__isnull=False).count() >= len(expected),
        timeout=max(remaining, 0) + 30,
        what="three ticks of every trigger",
    )
    fires = list(mine.values_list("trigger_id", "fire_at", "session_id", "error"))
    assert len(fires) == len(expected) and {(trigger, at) for trigger, at, _, _ in fires} == expected
    assert all(session and error is None for _, _, session, error in fires)
    sessions = {session for _, _, session, _ in fires}
    assert len(sessions) == TRIGGERS * TICKS
    fired_by = [child.output().count("fired for") for child in fleet.schedulers]
    assert sum(fired_by) >= len(expected)

    def all_answered() -> bool:
        answered = SessionEvent.objects.filter(session_id__in=sessions, type="agent.message")
        return answered.values("session_id").distinct().count() == len(sessions)

    wait_until(all_answered, timeout=120, what="every triggered session's answer")
    per_session = Counter(
        SessionEvent.objects.filter(session_id__in=sessions, type="agent.message").values_list("session_id", flat=True)
    )
    assert set(per_session.values()) == {1}
    print(f"fires by scheduler: {fired_by}")
