"""`python -m bench.webhooks`: webhook delivery (issue 28) on PostgreSQL.

Producers (`bench/webhooks/producer.py`, four processes on the ORM, each with a session of its own) write
session-like events: each transaction is a status change that appends a `SessionEvent` to its session's log and,
in the same transaction, `outbox.emit`s the two webhook events of that change (ten `session.*` types in turn).
One `runwebhooks` process (settings.base) delivers to 10 endpoints whose receivers are
`bench/webhooks/receiver.py`: one process on 10 loopback ports (uvloop + httptools) that notes each request's
arrival time. Lag = arrival - the event's `created_at` (one clock: same machine).

Cases:
1. Append rate: producers unpaced for `--append-seconds`, without a sender, then with the sender delivering
   (each endpoint subscribed to a tenth of the types): events per second, and the ratio.
2. `tenth`: each endpoint subscribes to one of the ten types, so each event makes one delivery: events at
   `--rate` (1,000/s) for `--seconds`, i.e. 1,000 deliveries/s.
3. `all`: each endpoint subscribes to every type, so each event makes ten deliveries: events at `--rate`
   (10,000 deliveries/s asked); then at the rate that case sustained, to show the lag there.

For each: events appended (and the rate reached), deliveries made while producing and until the backlog
drained, lag p50 / p99 / max over every delivery, and checks (every delivery arrived exactly once; a tenth of
the signatures verified by the receiver). Writes RESULTS.md beside this file.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading  # the sender's output is drained by a thread
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench.common import PROJECT_ROOT, free_port, machine_description, recreate_database, seed_sessions, setup_django

DATABASE_NAME = "registry_bench_webhooks"
RESULTS_FILE = Path(__file__).with_name("RESULTS.md")
ENDPOINTS = 10
# Each producer transaction is a session's status change: one session event, and the two webhook events the
# reference client types for it (as `registry.sessions.log.STATUS_WEBHOOKS` writes them), in five variants.
TRANSITIONS = (
    ("session.status_run_started", "session.running"),
    ("session.status_idled", "session.idled"),
    ("session.status_rescheduled", "session.pending"),
    ("session.updated", "session.requires_action"),
    ("session.outcome_evaluation_ended", "session.budget_reached"),
)
TYPES = tuple(event_type for transition in TRANSITIONS for event_type in transition)
PRODUCERS = 4


class Failed(Exception):
    """A delivery was lost or sent twice, or a signature did not verify."""


# -- producing ------------------------------------------------------------------------------------------------
def produce(database_url: str, sessions: list[str], rate: float | None, seconds: float) -> tuple[int, float, float]:
    """(events appended, seconds taken, wall-clock start) by one producer process per session
    (`bench/webhooks/producer.py`), each at rate / their number (None: as fast as they can), all starting at the
    same moment once their Django is up."""
    env = {**os.environ, "DATABASE_URL": database_url, "DJANGO_SETTINGS_MODULE": "settings.base"}
    env.pop("REDIS_URL", None)
    share = 0.0 if rate is None else rate / len(sessions)
    producers = [
        subprocess.Popen(
            [sys.executable, "-m", "bench.webhooks.producer", session, str(share), str(seconds), str(index)],
            cwd=PROJECT_ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        for index, session in enumerate(sessions)
    ]
    for producer in producers:
        assert producer.stdout is not None
        if producer.stdout.readline().strip() != b"ready":
            raise Failed("a producer did not start")
    start = time.time() + 0.2
    for producer in producers:  # every producer is told the start before any is waited for
        assert producer.stdin is not None
        producer.stdin.write(f"{start}\n".encode())
        producer.stdin.close()
    outputs = [producer.stdout.read().split() for producer in producers if producer.stdout is not None]
    if any(producer.wait(timeout=60) for producer in producers):
        raise Failed("a producer failed")
    return sum(int(count) for count, _ in outputs), max(float(elapsed) for _, elapsed in outputs), start


# -- the processes ---------------------------------------------------------------------------------------------
@contextmanager
def receivers(secrets_: list[str]) -> Iterator[tuple[list[int], Path, subprocess.Popen[bytes]]]:
    """The receiver process on ENDPOINTS free ports: (ports, where it writes its arrivals, the process)."""
    ports = [free_port() for _ in range(ENDPOINTS)]
    out = Path(tempfile.mkstemp(prefix="webhook-arrivals-", suffix=".txt")[1])
    command = [
        sys.executable,
        "-m",
        "bench.webhooks.receiver",
        f"--ports={','.join(map(str, ports))}",
        f"--secrets={','.join(secrets_)}",
        f"--out={out}",
    ]
    process = subprocess.Popen(command, cwd=PROJECT_ROOT, stdout=subprocess.PIPE)
    assert process.stdout is not None
    process.stdout.readline()  # "receiving"
    try:
        yield ports, out, process
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait(timeout=60)


def stop_receivers(process: subprocess.Popen[bytes], out: Path) -> tuple[list[tuple[int, str, float]], int]:
    """Stop the receiver: its arrivals (index, webhook-id, time) and how many signatures failed."""
    process.terminate()
    process.wait(timeout=120)
    lines = out.read_text().splitlines()
    out.unlink()
    rejected = int(lines[-1].split()[-1])
    arrivals = [(int(index), webhook_id, float(at)) for index, webhook_id, at in (line.split() for line in lines[:-1])]
    return arrivals, rejected


@contextmanager
def sender(database_url: str, **environment: str) -> Iterator[subprocess.Popen[bytes]]:
    """A `runwebhooks` process (settings.base), once it logged its start."""
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "DJANGO_SETTINGS_MODULE": "settings.base",
        "REGISTRY_EGRESS_ALLOW": "127.0.0.1",
        "REGISTRY_HEALTH_PORT": "off",
        **environment,
    }
    env.pop("REDIS_URL", None)
    command = [sys.executable, "manage.py", "runwebhooks"]
    process = subprocess.Popen(command, cwd=PROJECT_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert process.stdout is not None
    for line in process.stdout:
        if b" started (" in line:
            break
    else:
        raise RuntimeError("runwebhooks did not start")
    threading.Thread(target=process.stdout.read, daemon=True).start()
    try:
        yield process
    finally:
        process.terminate()
        process.wait(timeout=60)


def fresh_secrets() -> list[str]:
    from registry.webhooks.signing import new_signing_secret

    return [new_signing_secret() for _ in range(ENDPOINTS)]


# -- the cases --------------------------------------------------------------------------------------------------
def reset(workspace_id: str, ports: list[int], secrets_: list[str], fanout: str) -> None:
    """No events, deliveries or endpoints; then ENDPOINTS endpoints on `ports` subscribed per `fanout`."""
    from django.db import connection

    from registry.webhooks.models import WebhookEndpoint
    from registry.webhooks.signing import sealed_signing_secret

    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE webhooks_webhookattempt, webhooks_webhookdelivery, webhooks_webhookevent, "
            "webhooks_webhookendpoint"
        )
    for index, (port, secret) in enumerate(zip(ports, secrets_, strict=True)):
        events = list(TYPES) if fanout == "all" else [TYPES[index]]
        endpoint = WebhookEndpoint(
            workspace_id=workspace_id, url=f"http://127.0.0.1:{port}/hook/{index}", enabled_events=events
        )
        endpoint.signing_secret_sealed = sealed_signing_secret(secret, endpoint_id=endpoint.pk)
        endpoint.save()


def pending() -> int:
    """Deliveries not yet made and events not yet fanned out, read in one statement (one snapshot)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT (SELECT count(*) FROM webhooks_webhookdelivery WHERE status <> 'succeeded')"
            " + (SELECT count(*) FROM webhooks_webhookevent WHERE dispatched_at IS NULL)"
        )
        row = cursor.fetchone()
    return int(row[0]) if row else 0


def drain(timeout: float) -> float:
    """Seconds until nothing is left to deliver (or `timeout`)."""
    started = time.monotonic()
    while pending() and time.monotonic() - started < timeout:
        time.sleep(0.1)
    return time.monotonic() - started


@dataclass
class Case:
    name: str
    fanout: str
    rate: float
    seconds: float
    events: int = 0
    produced_for: float = 0.0
    deliveries: int = 0
    during: int = 0  # deliveries that arrived while the producers ran
    drained_after: float = 0.0
    lags: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)  # p50, p99, max, mean (s)
    duplicates: int = 0
    missing: int = 0
    rejected: int = 0

    @property
    def delivered_rate(self) -> float:
        """Deliveries per second while the producers ran."""
        return self.during / self.produced_for if self.produced_for else 0.0


def run_case(case: Case, database_url: str, workspace_id: str, sessions: list[str]) -> Case:
    from registry.webhooks.models import WebhookDelivery, WebhookEvent

    secrets_ = fresh_secrets()
    with receivers(secrets_) as (ports, out, process):
        reset(workspace_id, ports, secrets_, case.fanout)
        with sender(database_url):
            produce(database_url, sessions, 200, 1.0)  # warm-up: connections opened, code paths hot
            drain(60)
            warm = {event_id for event_id in WebhookEvent.objects.values_list("id", flat=True)}
            case.events, case.produced_for, started_wall = produce(database_url, sessions, case.rate, case.seconds)
            ended_wall = started_wall + case.produced_for
            case.drained_after = drain(300)
        arrivals, case.rejected = stop_receivers(process, out)
    created = {
        event_id: at.timestamp()
        for event_id, at in WebhookEvent.objects.exclude(id__in=warm).values_list("id", "created_at")
    }
    expected = Counter(
        (int(url.rsplit("/", 1)[1]), event_id)
        for url, event_id in WebhookDelivery.objects.exclude(event__id__in=warm).values_list(
            "endpoint__url", "event__id"
        )
    )
    seen = Counter((index, webhook_id) for index, webhook_id, _ in arrivals if webhook_id in created)
    case.deliveries = sum(expected.values())
    case.duplicates = sum(count - 1 for count in seen.values() if count > 1)
    case.missing = len(set(expected) - set(seen))
    first: dict[tuple[int, str], float] = {}
    for index, webhook_id, at in arrivals:
        if webhook_id in created:
            first.setdefault((index, webhook_id), at)
    lags = sorted(at - created[webhook_id] for (_, webhook_id), at in first.items())
    case.during = sum(1 for at in first.values() if started_wall <= at <= ended_wall)
    if lags:
        percentiles = statistics.quantiles(lags, n=100)
        case.lags = (statistics.median(lags), percentiles[98], lags[-1], statistics.fmean(lags))
    return case


def append_rates(database_url: str, workspace_id: str, sessions: list[str], seconds: float) -> tuple[float, float]:
    """Events per second appended unpaced: without a sender, then with one delivering (`tenth` fan-out)."""
    secrets_ = fresh_secrets()
    with receivers(secrets_) as (ports, out, process):
        reset(workspace_id, ports, secrets_, "tenth")
        count, elapsed, _ = produce(database_url, sessions, None, seconds)
        alone = count / elapsed
        reset(workspace_id, ports, secrets_, "tenth")
        with sender(database_url):
            produce(database_url, sessions, 200, 1.0)
            count, elapsed, _ = produce(database_url, sessions, None, seconds)
        stop_receivers(process, out)
    return alone, count / elapsed


def cpu_seconds(process_ids: set[int] | None = None) -> float:
    """CPU seconds (user + system) used so far by these processes, or by every PostgreSQL process (None)."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if process_ids is not None and int(stat.parent.name) not in process_ids:
                continue
            if process_ids is None and not (stat.parent / "cmdline").read_bytes().startswith(b"postgres"):
                continue
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, ValueError):
            continue  # it ended meanwhile
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


@dataclass
class Drained:
    """A backlog delivered by a sender started after it was written: its rate and the CPU it took."""

    fanout: str
    deliveries: int = 0
    seconds: float = 0.0
    sender_cpu: float = 0.0
    database_cpu: float = 0.0
    missing: int = 0
    duplicates: int = 0
    rejected: int = 0

    @property
    def rate(self) -> float:
        return self.deliveries / self.seconds if self.seconds else 0.0


def drain_backlog(fanout: str, database_url: str, sessions: list[str], seconds: float, workspace_id: str) -> Drained:
    """Producers unpaced for `seconds` with no sender; then one sender delivers the backlog."""
    from registry.webhooks.models import WebhookDelivery

    result = Drained(fanout)
    secrets_ = fresh_secrets()
    with receivers(secrets_) as (ports, out, process):
        reset(workspace_id, ports, secrets_, fanout)
        produce(database_url, sessions, None, seconds)
        database_before = cpu_seconds()
        with sender(database_url) as delivering:
            started = time.monotonic()
            sender_before = cpu_seconds({delivering.pid})
            drain(600)
            result.seconds = time.monotonic() - started
            result.sender_cpu = cpu_seconds({delivering.pid}) - sender_before
            result.database_cpu = cpu_seconds() - database_before
        arrivals, result.rejected = stop_receivers(process, out)
    expected = {
        (int(url.rsplit("/", 1)[1]), event_id)
        for url, event_id in WebhookDelivery.objects.values_list("endpoint__url", "event__id")
    }
    seen = Counter((index, webhook_id) for index, webhook_id, _ in arrivals)
    result.deliveries = len(expected)
    result.missing = len(expected - set(seen))
    result.duplicates = sum(count - 1 for count in seen.values() if count > 1)
    return result


# -- the report ------------------------------------------------------------------------------------------------
def case_row(case: Case) -> str:
    p50, p99, worst, mean = (value * 1000 for value in case.lags)
    asked = case.rate * (ENDPOINTS if case.fanout == "all" else 1)
    return (
        f"| {case.name} | {case.rate:.0f} ev/s x {case.seconds:.0f} s ({asked:.0f} deliveries/s asked) "
        f"| {case.events / case.produced_for:.0f} ev/s | {case.deliveries} | {case.delivered_rate:.0f}/s "
        f"| {case.drained_after:.1f} s | {p50:.0f} / {p99:.0f} / {worst:.0f} / {mean:.0f} "
        f"| {case.missing} / {case.duplicates} / {case.rejected} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rate", type=float, default=1000.0, help="events per second asked (default 1000)")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long each case produces (default 20)")
    parser.add_argument("--append-seconds", type=float, default=10.0)
    parser.add_argument(
        "--cases", default="append,drain,tenth,all", help="which of append, drain, tenth, all to run (comma list)"
    )
    arguments = parser.parse_args()
    chosen = set(arguments.cases.split(","))

    database_url = recreate_database(DATABASE_NAME)
    setup_django(database_url)
    from registry.sessions.models import Session

    _, sessions = seed_sessions(PRODUCERS)
    workspace_id = Session.objects.get(pk=sessions[0]).workspace_id
    load_at_start = os.getloadavg()[0]
    lines = [
        f"- One `runwebhooks` (settings.base defaults: poll 0.2 s, 8 requests in flight per endpoint, 256 in all); "
        f"{ENDPOINTS} endpoints on one receiver process (uvloop + httptools); {PRODUCERS} producer processes, "
        "each transaction one session event and two webhook events",
        "",
    ]
    failures: list[str] = []
    capacity: dict[str, float] = {}
    if "drain" in chosen:
        lines += [
            "## Backlog drained by one sender (the producers done before it starts)",
            "",
            "| fan-out | deliveries | seconds | deliveries/s | sender CPU ms per delivery "
            "| PostgreSQL CPU ms per delivery | missing / duplicates / bad signatures |",
            "|---|---|---|---|---|---|---|",
        ]
        for fanout in ("tenth", "all"):
            drained = drain_backlog(fanout, database_url, sessions, arguments.seconds, workspace_id)
            capacity[fanout] = drained.rate
            lines.append(
                f"| {fanout} | {drained.deliveries} | {drained.seconds:.1f} | {drained.rate:.0f} "
                f"| {1000 * drained.sender_cpu / drained.deliveries:.2f} "
                f"| {1000 * drained.database_cpu / drained.deliveries:.2f} "
                f"| {drained.missing} / {drained.duplicates} / {drained.rejected} |"
            )
            print(lines[-1], flush=True)
            if drained.missing or drained.duplicates or drained.rejected:
                failures.append(f"drain {fanout}: {drained.missing} missing, {drained.duplicates} twice")
        lines.append("")
    if "append" in chosen:
        alone, delivering = append_rates(database_url, workspace_id, sessions, arguments.append_seconds)
        lines += [
            "## Append rate (producers unpaced)",
            "",
            "| without a sender | with a sender delivering (tenth fan-out) | ratio |",
            "|---|---|---|",
            f"| {alone:.0f} ev/s | {delivering:.0f} ev/s | {delivering / alone:.2f} |",
            "",
        ]
        print("\n".join(lines[-6:]), flush=True)
    header = [
        "## Delivery",
        "",
        "| case | asked | appended | deliveries | delivered while producing | drained after "
        "| lag p50 / p99 / max / mean ms | missing / duplicates / bad signatures |",
        "|---|---|---|---|---|---|---|---|",
    ]
    rows: list[str] = []
    cases: list[Case] = []
    if "tenth" in chosen:
        cases.append(Case("tenth", "tenth", arguments.rate, arguments.seconds))
    if "all" in chosen:
        cases.append(Case("all", "all", arguments.rate, arguments.seconds))
    finished: list[Case] = []
    for case in cases:
        finished.append(run_case(case, database_url, workspace_id, sessions))
        rows.append(case_row(case))
        print(rows[-1], flush=True)
        appended = case.events / case.produced_for if case.produced_for else 0.0
        if case.drained_after > 1.0 or appended < 0.95 * case.rate:
            # Not sustained (the sender fell behind, or the producers did): again at a rate both keep up with
            # beside each other (the producers' appends and the sender share the two cores): at most half what a
            # sender drains alone, and 80 % of what the producers appended.
            per_event = ENDPOINTS if case.fanout == "all" else 1
            drains = capacity.get(case.fanout, case.delivered_rate)
            rate = max(10.0, round(min(drains * 0.5 / per_event, appended * 0.8), -1))
            sustained = Case(f"{case.name}, sustainable", case.fanout, rate, case.seconds)
            finished.append(run_case(sustained, database_url, workspace_id, sessions))
            rows.append(case_row(sustained))
            print(rows[-1], flush=True)
    for case in finished:
        if case.missing or case.duplicates or case.rejected:
            failures.append(f"{case.name}: {case.missing} missing, {case.duplicates} twice, {case.rejected} bad")
    if rows:
        lines += [*header, *rows, ""]
    heading = [
        "# Webhook delivery benchmark",
        "",
        *machine_description(),
        f"- Load average at the start {load_at_start:.2f}",
    ]
    lines = [*heading, *lines]
    RESULTS_FILE.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    if failures:
        raise Failed("; ".join(failures))


if __name__ == "__main__":
    main()
