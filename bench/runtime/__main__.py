"""`python -m bench.runtime`: the session runtime's pickup latency, concurrency and memory per session.

- pickup: `POST /events` with a `user.message` -> the runtime's model request arrives at the fake
  model (both clocks in this process), one session at a time, after `--warmup` turns not counted
  (the first turn of a fresh daphne and worker pays their lazy imports and first connections; it is
  reported on its own);
- concurrency: 64 sessions whose model takes 2 s each, on one worker process (effective concurrency
  = 64 x 2 s / wall time);
- scale: 200 sessions waiting on a slow model at once in one worker; its RSS idle and while they wait.

PostgreSQL (LISTEN/NOTIFY wake-ups) and the Redis channel layer; writes RESULTS.md beside this file.
"""

from __future__ import annotations

import argparse
import gc
import http.client
import json
import threading
import time
from pathlib import Path

from bench.common import (
    daphne,
    machine_description,
    p50_p99_mean,
    recreate_database,
    runsessions,
    seed_sessions,
    setup_django,
)
from fakes import model as replies
from fakes.model import FakeModel

DATABASE_NAME = "registry_bench_runtime"
REDIS_URL = "redis://127.0.0.1:6379/6"
RESULTS_FILE = Path(__file__).with_name("RESULTS.md")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def post(port: int, api_key: str, session_id: str) -> None:
    post_text(port, api_key, session_id, "benchmark")


def post_text(port: int, api_key: str, session_id: str, text: str) -> None:
    """A `user.message` with `text`, appended through the API."""
    post_event(port, api_key, session_id, {"type": "user.message", "content": [{"type": "text", "text": text}]})


def post_event(port: int, api_key: str, session_id: str, event: dict[str, object]) -> None:
    """One user event, appended through the API."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    body = json.dumps({"events": [event]})
    headers = {"x-api-key": api_key, "content-type": "application/json"}
    connection.request("POST", f"/v1/sessions/{session_id}/events", body=body, headers=headers)
    response = connection.getresponse()
    response.read()
    if response.status != 200:
        raise RuntimeError(f"append answered {response.status}")
    connection.close()


def wait_idle(session_ids: list[str], turns: int, timeout: float = 300) -> None:
    from django.db import connection

    from registry.sessions.models import SessionEvent

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = SessionEvent.objects.filter(session_id__in=session_ids, type="session.status_idle").count()
        connection.close()
        if done >= turns:
            return
        time.sleep(0.05)
    raise RuntimeError("sessions did not go idle in time")


def measure_pickup(port: int, api_key: str, session_id: str, model: FakeModel, turns: int) -> list[float]:
    """Each turn's pickup in ms, in order (the first is the cold one)."""
    latencies = []
    for turn in range(1, turns + 1):
        model.add(replies.text("ok"))
        sent = time.monotonic()
        post(port, api_key, session_id)
        while len(model.requests) < turn:
            time.sleep(0.0005)
        latencies.append((model.requests[turn - 1].at - sent) * 1000)
        wait_idle([session_id], turn)
    return latencies


def measure_concurrency(port: int, api_key: str, sessions: list[str], model: FakeModel, seconds: float) -> float:
    model.add(*[replies.text("done", delay=seconds) for _ in sessions])
    started = time.monotonic()
    posters = [threading.Thread(target=post, args=(port, api_key, session)) for session in sessions]
    for poster in posters:
        poster.start()
    for poster in posters:
        poster.join()
    wait_idle(sessions, len(sessions))
    return time.monotonic() - started


def measure_scale(port: int, api_key: str, sessions: list[str], model: FakeModel, pid: int) -> tuple[float, float]:
    idle = rss_mb(pid)
    model.add(*[replies.text("done", delay=30) for _ in sessions])
    for session in sessions:
        post(port, api_key, session)
    deadline = time.monotonic() + 120
    while model.in_flight < len(sessions) and time.monotonic() < deadline:
        time.sleep(0.1)
    if model.in_flight < len(sessions):
        raise RuntimeError(f"only {model.in_flight} of {len(sessions)} sessions reached the model")
    waiting = rss_mb(pid)
    model.reset()  # cut the slow answers short
    return idle, waiting


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pickups", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--scale", type=int, default=200)
    arguments = parser.parse_args()

    database_url = recreate_database(DATABASE_NAME)
    setup_django(database_url, REDIS_URL)
    api_key, sessions = seed_sessions(1 + 64 + arguments.scale)
    model = FakeModel()
    gc.freeze()  # the fake model's clock runs in this process: no full collection of Django's objects in it
    with daphne(database_url, REDIS_URL=REDIS_URL) as port:
        with runsessions(database_url, model.url, 32, REDIS_URL=REDIS_URL, DATABASE_POOL_SIZE="40"):
            turns = measure_pickup(port, api_key, sessions[0], model, arguments.warmup + arguments.pickups)
            cold, pickups = turns[0], turns[arguments.warmup :]
            model.reset()
            elapsed = measure_concurrency(port, api_key, sessions[1:65], model, 2.0)
        model.reset()
        with runsessions(
            database_url, model.url, arguments.scale + 16, REDIS_URL=REDIS_URL, DATABASE_POOL_SIZE="40"
        ) as process:
            idle, waiting = measure_scale(port, api_key, sessions[65:], model, process.pid)
    model.stop()
    p50, p99, mean = p50_p99_mean(pickups)
    report = "\n".join(
        [
            "# Runtime benchmark",
            "",
            *machine_description(),
            "- Registry: one daphne process (PostgreSQL, Redis channel layer); one `runsessions` worker",
            "- Model: the tests' scripted fake model on loopback, in the benchmark's process",
            "",
            f"## Pickup: POST user.message -> the model request ({len(pickups)} turns, one at a time)",
            "",
            f"After {arguments.warmup} warm-up turns; the first (cold) turn took {cold:.1f} ms.",
            "",
            "| p50 ms | p99 ms | mean ms |",
            "|---|---|---|",
            f"| {p50:.1f} | {p99:.1f} | {mean:.1f} |",
            "",
            "## Concurrency: 64 sessions, model answers in 2 s, one worker (concurrency 32)",
            "",
            f"Wall time {elapsed:.1f} s; effective concurrency {64 * 2.0 / elapsed:.1f}.",
            "",
            f"## Scale: {arguments.scale} sessions waiting on the model at once, one worker",
            "",
            "| worker RSS idle MB | RSS with all waiting MB | per waiting session KB |",
            "|---|---|---|",
            f"| {idle:.1f} | {waiting:.1f} | {(waiting - idle) * 1024 / arguments.scale:.0f} |",
        ]
    )
    RESULTS_FILE.write_text(report + "\n")
    print(report)


if __name__ == "__main__":
    main()
