"""`python -m bench.work`: the self-hosted work queue (issue 26), on PostgreSQL.

1. Poll latency: daphne (settings.base) on the bench database; `--pollers` threads of this process each loop
   `GET /v1/environments/{id}/work/poll?block_ms=999` on a keep-alive `http.client` connection with the
   environment key. The producer (this process, the ORM) creates a session of the self-hosted environment,
   which queues its work item in the creation's transaction, once the previous item was received plus a
   random 20-200 ms (so a poll is already waiting in LISTEN). Latency = the poller's receive time minus
   the commit (an `on_commit` hook registered first in the transaction), both on this process's monotonic
   clock. Each received item is force-stopped off the measured path; every queued item must be received
   exactly once. Also the round trip of an empty poll with `block_ms=1` and with no `block_ms`.
2. Soak: 100 sessions through 4 `scripts/environment_worker.py` processes (the reference client's
   `EnvironmentWorker`, `WORKER_MAX_IDLE=1`), 2 `runsessions` workers with no sandbox of their own, daphne
   with the Redis channel layer and the plan model (`fakes.plan_model`) in this process. Each session is
   asked for two `bash` calls that append `{i}-a` / `{i}-b` to one shared ledger file. Checked: 100
   sessions end their turn (`session.status_idle` with `end_turn`), 200 ledger lines with each exactly
   once, every `agent.tool_use` answered by exactly one `user.tool_result`, every work item stopped in the
   end; reported: work items per worker, wall time, sessions per minute. Any wrong count exits non-zero.

Writes RESULTS.md beside this file.
"""

from __future__ import annotations

import argparse
import gc
import http.client
import json
import os
import queue
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from bench.common import (
    PROJECT_ROOT,
    daphne,
    machine_description,
    p50_p99_mean,
    recreate_database,
    runsessions,
    setup_django,
)

DATABASE_NAME = "registry_bench_work"
REDIS_URL = "redis://127.0.0.1:6379/7"
RESULTS_FILE = Path(__file__).with_name("RESULTS.md")
MODEL = "claude-sonnet-4-5"
TOOLSET = {"type": "agent_toolset_20260401"}
LEASE_SECONDS = "10"


class Failed(Exception):
    """A count the benchmark checks is wrong."""


# -- HTTP ---------------------------------------------------------------------------------------------
def call(
    connection: http.client.HTTPConnection,
    method: str,
    path: str,
    headers: dict[str, str],
    body: Any = None,
    expect: int = 200,
) -> Any:
    """One request on a keep-alive connection; the JSON answer."""
    payload = None if body is None else json.dumps(body)
    sent = {**headers, "content-type": "application/json"} if payload is not None else headers
    connection.request(method, path, body=payload, headers=sent)
    response = connection.getresponse()
    data = response.read()
    if response.status != expect:
        raise Failed(f"{method} {path} answered {response.status}: {data[:500]!r}")
    return json.loads(data) if data else None


# -- part 1: poll latency -----------------------------------------------------------------------------
@dataclass
class Received:
    at: float
    sent: float  # when the poll that answered was sent
    poller: str
    item: dict[str, Any]


class Poller(threading.Thread):
    """Long polls back to back (block_ms=999) until `done` is set; items go to `received`."""

    def __init__(
        self, port: int, environment_id: str, key: str, name: str, received: queue.Queue[Received | Exception]
    ) -> None:
        super().__init__(name=name, daemon=True)
        self.port = port
        self.path = f"/v1/environments/{environment_id}/work/poll?block_ms=999"
        self.headers = {"authorization": f"Bearer {key}", "anthropic-worker-id": name}
        self.received = received
        self.done = threading.Event()
        self.polls = 0

    def run(self) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            while not self.done.is_set():
                sent = time.monotonic()
                connection.request("GET", self.path, headers=self.headers)
                response = connection.getresponse()
                body = response.read()
                at = time.monotonic()
                self.polls += 1
                if response.status != 200:
                    raise Failed(f"poll answered {response.status}: {body[:300]!r}")
                if body != b"null":
                    self.received.put(Received(at, sent, self.name, json.loads(body)))
        except Exception as error:  # handed to the producer, which fails the run
            self.received.put(error)
        finally:
            connection.close()


@dataclass
class LatencyResult:
    pollers: int
    latencies: list[float]
    warmup: list[float]
    fresh: list[float]  # counted samples whose poll was sent after the commit (between two long polls)
    ages: list[float]  # each counted sample's poll age at the commit, ms (how long it had been waiting)
    by_poller: Counter[str]
    polls: int


def seed_self_hosted(name: str) -> tuple[Any, str, str, str]:
    """A workspace with an agent and a self-hosted environment: (workspace, agent id, environment id, key)."""
    from registry.agents.services import agent_create
    from registry.environments.services import environment_create, environment_key_mint
    from registry.workspaces.services import workspace_create

    workspace, _ = workspace_create(name=name)
    agent = agent_create(workspace=workspace, values={"name": name, "model": MODEL})
    environment = environment_create(workspace=workspace, values={"name": name, "config": {"type": "self_hosted"}})
    key = environment_key_mint(environment=environment, name="bench").plaintext
    return workspace, agent.id, environment.id, key


def stamp(into: list[float]) -> None:
    into.append(time.monotonic())


def measure_poll_latency(port: int, pollers: int, warmup: int, samples: int) -> LatencyResult:
    from django.db import transaction

    from registry.sessions.models import WorkItem
    from registry.sessions.services import session_create

    workspace, agent_id, environment_id, key = seed_self_hosted(f"bench-latency-{pollers}")
    received: queue.Queue[Received | Exception] = queue.Queue()
    threads = [Poller(port, environment_id, key, f"poller-{index}", received) for index in range(pollers)]
    for thread in threads:
        thread.start()
    stopper = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    auth = {"authorization": f"Bearer {key}"}
    values = {"agent": {"id": agent_id}, "environment_id": environment_id}
    created: list[str] = []
    got: list[Received] = []
    latencies: list[float] = []
    fresh: list[float] = []
    ages: list[float] = []
    time.sleep(0.3)  # every poller is in its first long poll
    last = time.monotonic()
    try:
        for _ in range(warmup + samples):
            time.sleep(max(0.0, random.uniform(0.02, 0.2) - (time.monotonic() - last)))
            committed: list[float] = []
            with transaction.atomic():
                transaction.on_commit(partial(stamp, committed))  # the first hook to run after COMMIT
                session = session_create(workspace=workspace, values=values)
            created.append(session.id)
            outcome = received.get(timeout=10)
            if isinstance(outcome, Exception):
                raise outcome
            got.append(outcome)
            last = outcome.at
            latencies.append((outcome.at - committed[0]) * 1000)
            if len(latencies) > warmup:
                ages.append((committed[0] - outcome.sent) * 1000)
                if outcome.sent > committed[0]:
                    fresh.append(latencies[-1])
            if outcome.item["data"]["id"] != session.id:
                raise Failed(f"received {outcome.item['data']['id']}, expected the item of {session.id}")
            path = f"/v1/environments/{environment_id}/work/{outcome.item['id']}/stop"
            call(stopper, "POST", path, auth, {"force": True})
    finally:
        for thread in threads:
            thread.done.set()
        for thread in threads:
            thread.join(timeout=5)
        stopper.close()
    while not received.empty():  # nothing more may arrive: an item twice would be here
        extra = received.get()
        if isinstance(extra, Exception):
            raise extra
        got.append(extra)
    # Every queued item received exactly once, by one of the pollers, and stopped.
    items = {item.pk: item for item in WorkItem.objects.filter(environment_id=environment_id)}
    received_ids = [entry.item["id"] for entry in got]
    if len(received_ids) != len(set(received_ids)) or set(received_ids) != set(items):
        raise Failed(f"queued {len(items)} items, received {len(received_ids)} ({len(set(received_ids))} distinct)")
    if sorted(item.session_ref for item in items.values()) != sorted(created):
        raise Failed("the received items are not one per created session")
    states = Counter(item.state for item in items.values())
    if states != Counter({"stopped": len(created)}):
        raise Failed(f"items not all stopped: {dict(states)}")
    return LatencyResult(
        pollers=pollers,
        latencies=latencies[warmup:],
        warmup=latencies[:warmup],
        fresh=fresh,
        ages=ages,
        by_poller=Counter(entry.poller for entry in got),
        polls=sum(thread.polls for thread in threads),
    )


def measure_empty_poll(port: int, query: str, warmup: int, count: int) -> list[float]:
    """Round trips (ms) of a poll on an empty queue."""
    _, _, environment_id, key = seed_self_hosted(f"bench-empty-{query or 'none'}")
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"authorization": f"Bearer {key}", "anthropic-worker-id": "empty"}
    path = f"/v1/environments/{environment_id}/work/poll{query}"
    timings = []
    for _ in range(warmup + count):
        started = time.monotonic()
        answer = call(connection, "GET", path, headers)
        timings.append((time.monotonic() - started) * 1000)
        if answer is not None:
            raise Failed(f"an empty poll returned {answer}")
    connection.close()
    return timings[warmup:]


# -- part 2: soak -------------------------------------------------------------------------------------
@dataclass
class Worker:
    name: str
    process: subprocess.Popen[bytes]
    log: Path


@contextmanager
def environment_workers(
    base_url: str, environment_id: str, key: str, directory: Path, count: int
) -> Iterator[list[Worker]]:
    """`count` environment worker processes, each with its own working directory, once each polls."""
    workers: list[Worker] = []
    try:
        for index in range(count):
            name = f"worker-{index}"
            workdir = directory / name
            workdir.mkdir(parents=True)
            env = {
                **os.environ,
                "ANTHROPIC_BASE_URL": base_url,
                "ANTHROPIC_ENVIRONMENT_ID": environment_id,
                "ANTHROPIC_ENVIRONMENT_KEY": key,
                "WORKER_WORKDIR": str(workdir),
                "WORKER_ID": name,
                "WORKER_MAX_IDLE": "1",
                "WORKER_MEMORY_SYNC_SECONDS": "5",
                "PYTHONUNBUFFERED": "1",
            }
            log = directory / f"{name}.log"
            with log.open("wb") as output:
                command = [sys.executable, "scripts/environment_worker.py"]
                process = subprocess.Popen(command, cwd=PROJECT_ROOT, env=env, stdout=output, stderr=output)
            workers.append(Worker(name, process, log))
        deadline = time.monotonic() + 60
        for worker in workers:
            while "polling" not in worker.log.read_text(errors="replace"):
                if worker.process.poll() is not None or time.monotonic() > deadline:
                    raise Failed(f"{worker.name} did not start:\n{tail(worker.log)}")
                time.sleep(0.1)
        yield workers
    finally:
        for worker in workers:
            if worker.process.poll() is None:
                worker.process.terminate()
        for worker in workers:
            try:
                worker.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                worker.process.kill()
                worker.process.wait()


def tail(log: Path, lines: int = 30) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


@dataclass
class SoakResult:
    sessions: int
    finished: int = 0
    wall_seconds: float = 0.0
    ledger_lines: int = 0
    tool_uses: int = 0
    tool_results: int = 0
    items_per_worker: dict[str, int] = field(default_factory=dict)
    items_per_session: Counter[int] = field(default_factory=Counter)
    item_states: dict[str, int] = field(default_factory=dict)
    requires_action_idles: int = 0
    model_requests: int = 0
    failures: list[str] = field(default_factory=list)


def of_type(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [event for event in events if event.get("type") == kind]


def ended_turn(events: list[dict[str, Any]]) -> bool:
    idles = of_type(events, "session.status_idle")
    return any((event.get("stop_reason") or {}).get("type") == "end_turn" for event in idles)


def soak(sessions: int, worker_count: int, runtime_workers: int, timeout: float) -> SoakResult:
    from django.db import connection as database

    from fakes.plan_model import PlanModel, plan
    from registry.environments.models import Environment
    from registry.environments.services import environment_key_mint
    from registry.sessions.models import SessionEvent, WorkItem
    from registry.workspaces.services import workspace_create

    result = SoakResult(sessions=sessions)
    _, issued = workspace_create(name="bench-soak")
    api = {"x-api-key": issued.plaintext}
    model = PlanModel()
    database_url = os.environ["DATABASE_URL"]
    settings = {
        "REDIS_URL": REDIS_URL,
        "REGISTRY_MODEL_BASE_URL": model.url,
        "REGISTRY_MODEL_API_KEY": "bench",
        "REGISTRY_SANDBOX_BACKEND": "none",
        "REGISTRY_WORK_LEASE_SECONDS": LEASE_SECONDS,
    }
    with ExitStack() as stack:
        stack.callback(model.stop)
        directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-work-")))
        ledger = directory / "ledger.txt"
        ledger.touch()
        port = stack.enter_context(daphne(database_url, **settings))
        for _ in range(runtime_workers):
            stack.enter_context(runsessions(database_url, model.url, 32, **settings))
        client = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        stack.callback(client.close)
        agent = call(client, "POST", "/v1/agents", api, {"name": "soak", "model": MODEL, "tools": [TOOLSET]})
        environment = call(client, "POST", "/v1/environments", api, {"name": "soak", "config": {"type": "self_hosted"}})
        environment_id = environment["id"]
        key = environment_key_mint(environment=Environment.objects.get(pk=environment_id), name="soak").plaintext
        workers = stack.enter_context(
            environment_workers(f"http://127.0.0.1:{port}", environment_id, key, directory, worker_count)
        )
        started = time.monotonic()
        session_ids: list[str] = []
        for index in range(sessions):
            values = {"agent": agent["id"], "environment_id": environment_id}
            session = call(client, "POST", "/v1/sessions", api, values)
            text = plan(
                ("bash", {"command": f"echo {index}-a >> {ledger}"}),
                ("bash", {"command": f"echo {index}-b >> {ledger}"}),
            )
            message = {"type": "user.message", "content": [{"type": "text", "text": text}]}
            call(client, "POST", f"/v1/sessions/{session['id']}/events", api, {"events": [message]})
            session_ids.append(session["id"])
        events_of: dict[str, list[dict[str, Any]]] = {}
        pending = set(session_ids)
        deadline = started + timeout
        while pending and time.monotonic() < deadline:
            idle = set(
                SessionEvent.objects.filter(session_id__in=pending, type="session.status_idle")
                .values_list("session_id", flat=True)
                .distinct()
            )
            database.close()
            for session_id in sorted(idle):
                events = call(client, "GET", f"/v1/sessions/{session_id}/events?limit=1000", api)["data"]
                if ended_turn(events):
                    events_of[session_id] = events
                    pending.discard(session_id)
            if pending:
                time.sleep(0.2)
        result.wall_seconds = time.monotonic() - started
        result.finished = len(events_of)
        if pending:
            result.failures.append(f"{len(pending)} sessions did not end their turn in {timeout:.0f} s")
            for worker in workers:
                print(f"--- {worker.name}\n{tail(worker.log)}", file=sys.stderr)
        # Every item is let go once its session has been idle for the worker's max_idle.
        live = WorkItem.objects.filter(environment_id=environment_id).exclude(state="stopped")
        settle = time.monotonic() + 30
        while live.exists() and time.monotonic() < settle:
            time.sleep(0.2)
        result.model_requests = len(model.requests)
        lines = ledger.read_text().splitlines()
    items = list(WorkItem.objects.filter(environment_id=environment_id))
    result.items_per_worker = dict(sorted(Counter(str(item.worker_id) for item in items).items()))
    result.items_per_session = Counter(Counter(item.session_ref for item in items).values())
    result.item_states = dict(Counter(str(item.state) for item in items))
    if set(result.item_states) != {"stopped"}:
        result.failures.append(f"work items not all stopped at the end: {result.item_states}")
    # The ledger: each call ran once, none lost.
    result.ledger_lines = len(lines)
    expected = Counter(f"{index}-{part}" for index in range(sessions) for part in "ab")
    if Counter(lines) != expected:
        twice = sorted(line for line, count in Counter(lines).items() if count > 1)
        lost = sorted(set(expected) - set(lines))
        result.failures.append(f"ledger: {len(lines)} lines, run more than once {twice[:10]}, lost {lost[:10]}")
    # Every tool call answered exactly once, by the worker.
    for session_id, events in events_of.items():
        uses = [event["id"] for event in of_type(events, "agent.tool_use")]
        answers = [str(event.get("tool_use_id")) for event in of_type(events, "user.tool_result")]
        result.tool_uses += len(uses)
        result.tool_results += len(answers)
        reasons = [(event.get("stop_reason") or {}).get("type") for event in of_type(events, "session.status_idle")]
        result.requires_action_idles += reasons.count("requires_action")
        if len(uses) != 2 or sorted(uses) != sorted(answers) or of_type(events, "agent.tool_result"):
            result.failures.append(f"{session_id}: tool uses {uses}, user.tool_result for {answers}")
    if result.finished != sessions:
        result.failures.append(f"sessions finished {result.finished} of {sessions}")
    return result


# -- report -------------------------------------------------------------------------------------------
def latency_rows(results: list[LatencyResult]) -> list[str]:
    rows = [
        "| pollers | samples | p50 ms | p99 ms | mean ms | max ms | items per poller | taken by a new poll (p50) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for result in results:
        p50, p99, mean = p50_p99_mean(result.latencies)
        share = ", ".join(f"{count}" for _, count in sorted(result.by_poller.items()))
        fresh = f" ({statistics.median(result.fresh):.1f} ms)" if result.fresh else ""
        rows.append(
            f"| {result.pollers} | {len(result.latencies)} | {p50:.1f} | {p99:.1f} | {mean:.1f} "
            f"| {max(result.latencies):.1f} | {share} | {len(result.fresh)}{fresh} |"
        )
    return rows


def slowest(result: LatencyResult, count: int = 5) -> str:
    """The slowest samples as `latency (age of the poll at the commit)`, ms."""
    pairs = sorted(zip(result.latencies, result.ages, strict=True), reverse=True)[:count]
    return ", ".join(f"{latency:.0f} ({age:.0f})" for latency, age in pairs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--pollers", default="1,2", help="poller thread counts to measure, e.g. 1,2")
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--runtime-workers", type=int, default=2)
    parser.add_argument("--soak-timeout", type=float, default=240)
    parser.add_argument("--skip-soak", action="store_true")
    parser.add_argument("--skip-latency", action="store_true")
    arguments = parser.parse_args()

    database_url = recreate_database(DATABASE_NAME)
    setup_django(database_url)
    gc.freeze()  # the pollers' clock runs in this process: no full collection of Django's objects in it
    latency: list[LatencyResult] = []
    empty: dict[str, list[float]] = {}
    if not arguments.skip_latency:
        with daphne(database_url) as port:
            for pollers in [int(count) for count in arguments.pollers.split(",")]:
                latency.append(measure_poll_latency(port, pollers, arguments.warmup, arguments.samples))
                print(*latency_rows(latency[-1:]), sep="\n", flush=True)
            for query in ("?block_ms=1", ""):
                empty[query] = measure_empty_poll(port, query, 20, 200)
    result = None
    if not arguments.skip_soak:
        result = soak(arguments.sessions, arguments.workers, arguments.runtime_workers, arguments.soak_timeout)
    report = [
        "# Self-hosted work queue benchmark (issue 26)",
        "",
        *machine_description(),
        "- Registry: one daphne process (settings.base, PostgreSQL LISTEN/NOTIFY), its own database",
        "",
    ]
    if latency:
        report += [
            "## Poll latency: session created (its item queued, committed) -> the long poll's answer received",
            "",
            "`block_ms=999` long polls on keep-alive connections from threads of the benchmark's process; one item",
            f"at a time, queued 20-200 ms after the previous was received; {arguments.warmup} warm-up items not",
            "counted; every item received exactly once (checked) and force-stopped off the measured path.",
            "Target: p50 ≤ 20 ms, p99 ≤ 100 ms.",
            "",
            *latency_rows(latency),
            "",
            "Slowest samples, ms (in brackets how long their poll had been waiting at the commit):",
            "",
            *[f"- {measured.pollers} poller(s): {slowest(measured)}" for measured in latency],
            "",
            "Empty poll round trip (200 after 20 warm-up, one keep-alive connection):",
            "",
            "| query | p50 ms | p99 ms | mean ms |",
            "|---|---|---|---|",
        ]
        for query, timings in empty.items():
            p50, p99, mean = p50_p99_mean(timings)
            report.append(f"| `{query or '(no block_ms)'}` | {p50:.1f} | {p99:.1f} | {mean:.1f} |")
        report.append("")
    if result is not None:
        spread = sorted(result.items_per_session.items())
        per_session = ", ".join(f"{count} sessions with {items}" for items, count in spread)
        report += [
            f"## Soak: {result.sessions} sessions, {arguments.workers} environment workers, "
            f"{arguments.runtime_workers} runsessions",
            "",
            "Each session: one `user.message` planning two `bash` calls that append to one shared ledger; the",
            "reference client's `EnvironmentWorker` (`scripts/environment_worker.py`, `WORKER_MAX_IDLE=1`) runs",
            f"them; plan model in the benchmark's process, Redis channel layer, lease {LEASE_SECONDS} s.",
            "",
            "| figure | value |",
            "|---|---|",
            f"| sessions finished (`end_turn`) | {result.finished} of {result.sessions} |",
            f"| ledger lines (each `i-a`/`i-b` once) | {result.ledger_lines} of {2 * result.sessions} |",
            f"| `agent.tool_use` / `user.tool_result` | {result.tool_uses} / {result.tool_results} |",
            f"| idles with `requires_action` (waiting for the worker) | {result.requires_action_idles} |",
            f"| model requests | {result.model_requests} |",
            f"| work items per worker | {', '.join(f'{k}: {v}' for k, v in result.items_per_worker.items())} |",
            f"| work items per session | {per_session} |",
            f"| work item states at the end | {result.item_states} |",
            f"| wall time (first create -> last `end_turn` seen) | {result.wall_seconds:.1f} s |",
            f"| sessions per minute | {result.finished * 60 / result.wall_seconds:.1f} |",
            "",
        ]
        if result.failures:
            report += ["**FAILED:**", "", *[f"- {failure}" for failure in result.failures], ""]
    RESULTS_FILE.write_text("\n".join(report))
    print("\n".join(report))
    if result is not None and result.failures:
        raise SystemExit("bench.work soak failed: " + "; ".join(result.failures))


if __name__ == "__main__":
    main()
