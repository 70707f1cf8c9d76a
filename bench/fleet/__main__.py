"""`python -m bench.fleet [--seconds S] [--write]`: figures of the product run as a fleet on this machine.

1. Registry throughput behind nginx (Debian's, a generated config, one nginx worker): `GET /v1/agents/{id}`
   from 32 keep-alive connections, with 1 then 2 daphne processes as the upstream pool.
2. Gateway throughput, `rungateway --workers 1` then `--workers 2`: chat completions from 32 keep-alive
   connections to a raw-asyncio fake provider (the gateway benchmark's).
3. Trigger scheduler lag with 1,000 active triggers and two `runtriggers` (the fleet's count, default
   poll of 1 s): lag = the fired session's creation time minus the scheduled tick, for triggers spread over
   the hour (`M * * * *`, about 17 per minute) and for the worst case of all 1,000 due on the same minute.

Everything runs on the same two cores (load generator included), on a scratch database `bench_fleet`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.common import PROJECT_ROOT, daphne, free_port, machine_description, recreate_database, setup_django
from bench.gateway.__main__ import CHAT, gateway_config, process, wait_http
from bench.gateway.loadgen import Client, Results, build_request
from fakes.balancer import Pool, nginx

RESULTS = Path(__file__).with_name("RESULTS.md")
CONCURRENCY = 32
TRIGGERS = 1000


async def drive(port: int, request: bytes, *, seconds: float) -> Results:
    """`CONCURRENCY` keep-alive connections sending `request` back to back for `seconds`."""
    loop = asyncio.get_running_loop()
    results = Results()
    deadline = time.perf_counter() + seconds

    async def connection() -> None:
        client = (await loop.create_connection(Client, "127.0.0.1", port))[1]
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            try:
                _, status = await client.send(request)
            except ConnectionError:
                results.errors += 1
                client = (await loop.create_connection(Client, "127.0.0.1", port))[1]
                continue
            if status == 200:
                results.latencies.append(time.perf_counter() - started)
            else:
                results.errors += 1
        if client.transport is not None:
            client.transport.close()

    started = time.perf_counter()
    await asyncio.gather(*(connection() for _ in range(CONCURRENCY)))
    results.elapsed = time.perf_counter() - started
    return results


def load(port: int, request: bytes, seconds: float) -> Results:
    asyncio.run(drive(port, request, seconds=min(2.0, seconds)))  # warm-up: connections, caches, JIT-free paths
    return asyncio.run(drive(port, request, seconds=seconds))


def row(name: str, results: Results) -> str:
    p50, p99 = results.percentile(results.latencies, 0.5), results.percentile(results.latencies, 0.99)
    return f"| {name} | {results.throughput:.0f} | {p50:.1f} | {p99:.1f} | {results.errors} |"


# -- 1. registry ------------------------------------------------------------------------------------
def registry_scaling(database_url: str, seconds: float) -> tuple[list[str], float]:
    from registry.agents.services import agent_create
    from registry.workspaces.services import workspace_create

    workspace, issued = workspace_create(name="bench-fleet")
    agent = agent_create(workspace=workspace, values={"name": "bench", "model": "claude-sonnet-4-5"})
    rows, rates = [], {}
    with daphne(database_url) as first, daphne(database_url) as second:
        for label, replicas in (("1 process", (first,)), ("2 processes", (first, second))):
            port = free_port()
            pool = Pool("registry", port, tuple(f"127.0.0.1:{each}" for each in replicas))
            request = (
                f"GET /v1/agents/{agent.id} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nx-api-key: {issued.plaintext}\r\n\r\n"
            ).encode()
            with nginx([pool]):
                results = load(port, request, seconds)
            rates[label] = results.throughput
            rows.append(row(f"registry, {label} behind nginx", results))
    return rows, rates["2 processes"] / rates["1 process"]


# -- 2. gateway -------------------------------------------------------------------------------------
def gateway_workers(seconds: float) -> tuple[list[str], float]:
    provider_port = free_port()
    rows, rates = [], {}
    with (
        tempfile.TemporaryDirectory() as scratch,
        process([sys.executable, "-m", "bench.gateway.fake_provider", str(provider_port)]),
    ):
        wait_http(f"http://127.0.0.1:{provider_port}/")
        for workers in (1, 2):
            port = free_port()
            config = gateway_config(Path(scratch), provider_port, port)
            command = [sys.executable, "manage.py", "rungateway", "--config", str(config), "--workers", str(workers)]
            with process(command, env={"BENCH_PROVIDER_KEY": "bench"}):
                wait_http(f"http://127.0.0.1:{port}/")
                results = load(port, build_request(port, "/v1/chat/completions", CHAT), seconds)
            rates[workers] = results.throughput
            rows.append(row(f"gateway, --workers {workers}", results))
    return rows, rates[2] / rates[1]


# -- 3. scheduler -----------------------------------------------------------------------------------
@contextmanager
def schedulers(database_url: str, count: int = 2) -> Iterator[None]:
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "DJANGO_SETTINGS_MODULE": "settings.base",
        "REGISTRY_HEALTH_PORT": "0",
    }
    env.pop("REDIS_URL", None)
    with ExitStack() as stack:
        for _ in range(count):
            child = subprocess.Popen(
                [sys.executable, "manage.py", "runtriggers"],
                cwd=PROJECT_ROOT,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            stack.callback(child.wait, 30)
            stack.callback(child.terminate)
        yield


def trigger_lag(database_url: str) -> list[str]:
    from registry.agents.services import agent_create
    from registry.environments.services import environment_create
    from registry.triggers.models import Trigger, TriggerFire
    from registry.triggers.services import trigger_archive, trigger_create
    from registry.workspaces.services import workspace_create

    workspace, _ = workspace_create(name="bench-triggers")
    agent = agent_create(workspace=workspace, values={"name": "cron", "model": "claude-sonnet-4-5"})
    environment = environment_create(workspace=workspace, values={"name": "cron"})

    def create(schedule_of: object) -> list[str]:
        return [
            trigger_create(
                workspace=workspace,
                values={
                    "name": f"t{index}",
                    "agent": {"id": agent.id},
                    "source": {"schedule": schedule_of(index), "payload": "tick"},  # type: ignore[operator]
                    "session": {"environment_id": environment.id},
                },
            ).id
            for index in range(TRIGGERS)
        ]

    lines = []
    cases = (
        ("spread over the hour (`M * * * *`, ~17 due a minute)", lambda index: f"{index % 60} * * * *", 2),
        ("all due on the same minute (`* * * * *`)", lambda index: "* * * * *", 1),
    )
    for label, schedule_of, ticks in cases:
        ids = create(schedule_of)
        started = datetime.now(UTC)
        first_tick = started.replace(second=0, microsecond=0) + timedelta(minutes=1)
        until = first_tick + timedelta(minutes=ticks - 1)
        expected = Trigger.objects.filter(pk__in=ids, next_fire_at__lte=until).count() if ticks == 1 else None
        with schedulers(database_url):
            settle = until + timedelta(seconds=30 if ticks == 1 else 5)
            while datetime.now(UTC) < settle:
                time.sleep(1)
        fires = TriggerFire.objects.filter(trigger_id__in=ids, fire_at__lte=until, session__isnull=False)
        lags = [
            (created - fire_at).total_seconds()
            for fire_at, created in fires.values_list("fire_at", "session__created_at")
        ]
        active = Trigger.objects.filter(pk__in=ids, status="active").count()
        for trigger in Trigger.objects.filter(pk__in=ids):
            trigger_archive(trigger=trigger)
        if not lags:
            lines.append(f"| {label} | {active} | 0 | - | - | - |")
            continue
        quantiles = statistics.quantiles(lags, n=100, method="inclusive") if len(lags) > 1 else [lags[0]] * 99
        lines.append(
            f"| {label} | {active} | {len(lags)}{'' if expected is None else f' of {expected}'} | "
            f"{statistics.median(lags):.3f} | {quantiles[98]:.3f} | {max(lags):.3f} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=10.0, help="measured seconds per throughput figure")
    parser.add_argument("--skip-triggers", action="store_true", help="the throughput figures only")
    parser.add_argument("--write", action="store_true", help="write bench/fleet/RESULTS.md")
    args = parser.parse_args()
    database_url = recreate_database("bench_fleet")
    setup_django(database_url)
    registry_rows, registry_ratio = registry_scaling(database_url, args.seconds)
    gateway_rows, gateway_ratio = gateway_workers(args.seconds)
    trigger_rows = [] if args.skip_triggers else trigger_lag(database_url)
    skipped = " --skip-triggers" if args.skip_triggers else ""
    report = [
        "# Fleet benchmark results",
        "",
        f"Command: `python -m bench.fleet --seconds {args.seconds:g}{skipped}`.",
        "",
        *machine_description(),
        "",
        f"## Throughput ({CONCURRENCY} keep-alive connections, {args.seconds:g} s after a 2 s warm-up)",
        "",
        "| target | req/s | p50 ms | p99 ms | errors |",
        "|---|---|---|---|---|",
        *registry_rows,
        *gateway_rows,
        "",
        f"- Registry, 2 processes / 1 process behind nginx: **{registry_ratio:.2f}x**",
        f"- Gateway, `--workers 2` / `--workers 1`: **{gateway_ratio:.2f}x**",
        "",
    ]
    if trigger_rows:
        report += [
            f"## Trigger scheduler lag ({TRIGGERS} active triggers, 2 schedulers, poll 1 s)",
            "",
            "| triggers | active | fires measured | p50 s | p99 s | max s |",
            "|---|---|---|---|---|---|",
            *trigger_rows,
            "",
        ]
    text = "\n".join(report)
    print(text)
    if args.write:
        RESULTS.write_text(text)


if __name__ == "__main__":
    main()
