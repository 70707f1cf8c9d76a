"""`python -m bench.sessions`: event append throughput (1 and 20 writers) and fan-out latency from an
append's commit to the frame at 200 open streams, against PostgreSQL and Redis on this machine.

Writes RESULTS.md beside this file.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from bench.common import (
    daphne,
    machine_description,
    p50_p99_mean,
    recreate_database,
    seed_sessions,
    setup_django,
)

DATABASE_NAME = "registry_bench_sessions"
REDIS_URL = "redis://127.0.0.1:6379/5"
RESULTS_FILE = Path(__file__).with_name("RESULTS.md")
MESSAGE = {"type": "user.message", "content": [{"type": "text", "text": "benchmark"}]}


@dataclass(frozen=True)
class Throughput:
    """Events appended per second by `writers` concurrent clients."""

    name: str
    writers: int
    events: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.events / self.seconds


# -- append throughput through the API -----------------------------------------------------------
def api_writer(port: int, api_key: str, session_id: str, batch: int, stop_at: float, counts: list[int]) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    body = json.dumps({"events": [MESSAGE] * batch})
    headers = {"x-api-key": api_key, "content-type": "application/json"}
    appended = 0
    while time.monotonic() < stop_at:
        connection.request("POST", f"/v1/sessions/{session_id}/events", body=body, headers=headers)
        response = connection.getresponse()
        response.read()
        if response.status != 200:
            raise RuntimeError(f"append answered {response.status}")
        appended += batch
    counts.append(appended)


def measure_api(port: int, api_key: str, sessions: list[str], writers: int, batch: int, seconds: float) -> Throughput:
    counts: list[int] = []
    stop_at = time.monotonic() + seconds
    started = time.monotonic()
    threads = [
        threading.Thread(target=api_writer, args=(port, api_key, sessions[index], batch, stop_at, counts))
        for index in range(writers)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    name = f"POST /events, {batch} event(s) per request"
    return Throughput(name, writers, sum(counts), time.monotonic() - started)


# -- fan-out latency ------------------------------------------------------------------------------
async def stream_reader(
    port: int,
    api_key: str,
    session_id: str,
    arrivals: dict[int, list[float]],
    ready: asyncio.Event,
    opened: list[int],
    expected: int,
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    request = (
        f"GET /v1/sessions/{session_id}/events/stream HTTP/1.1\r\nHost: bench\r\n"
        f"x-api-key: {api_key}\r\nAccept: text/event-stream\r\n\r\n"
    )
    writer.write(request.encode())
    await writer.drain()
    await reader.readuntil(b"stream open\n\n")
    opened.append(1)
    ready.set()
    seen = 0
    while seen < expected:
        line = await reader.readline()
        if line.startswith(b"id: "):
            arrivals.setdefault(int(line[4:]), []).append(time.perf_counter())
            seen += 1
    writer.close()


def emit_events(session_id: str, count: int, interval: float, commits: dict[int, float]) -> None:
    from django.db import connection

    from registry.sessions import log

    for _ in range(count):
        event = log.emit(session_id=session_id, type="agent.message", body={"content": [{"type": "text", "text": "x"}]})
        commits[int(event.seq or 0)] = time.perf_counter()  # log.emit returns after its commit
        time.sleep(interval)
    connection.close()


async def measure_fanout(port: int, api_key: str, session_id: str, streams: int, events: int) -> list[float]:
    arrivals: dict[int, list[float]] = {}
    commits: dict[int, float] = {}
    opened: list[int] = []
    ready = asyncio.Event()
    readers = [
        asyncio.create_task(stream_reader(port, api_key, session_id, arrivals, ready, opened, events))
        for _ in range(streams)
    ]
    while len(opened) < streams:
        await asyncio.sleep(0.05)
    emitter = threading.Thread(target=emit_events, args=(session_id, events, 0.05, commits))
    emitter.start()
    await asyncio.wait_for(asyncio.gather(*readers), timeout=120)
    emitter.join()
    return [(arrived - commits[seq]) * 1000 for seq, times in arrivals.items() for arrived in times]


def render(throughputs: list[Throughput], fanout: list[float], streams: int, events: int) -> str:
    p50, p99, mean = p50_p99_mean(fanout)
    lines = [
        "# Session benchmarks",
        "",
        *machine_description(),
        "- Server: one daphne process (settings.base, pooled PostgreSQL connections, Redis channel layer)",
        "- Clients: `http.client` threads (append), raw asyncio sockets (streams), in one other process",
        "",
        "## Event append throughput (PostgreSQL)",
        "",
        "| how | writers | events | seconds | events/s |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {item.name} | {item.writers} | {item.events} | {item.seconds:.1f} | {item.rate:.0f} |"
        for item in throughputs
    ]
    lines += [
        "",
        f"## Fan-out: commit of an append to the frame at each of {streams} open streams",
        "",
        f"{events} events, one every 50 ms, {len(fanout)} frames measured.",
        "",
        "| p50 ms | p99 ms | mean ms |",
        "|---|---|---|",
        f"| {p50:.1f} | {p99:.1f} | {mean:.1f} |",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--events", type=int, default=100)
    arguments = parser.parse_args()

    database_url = recreate_database(DATABASE_NAME)
    setup_django(database_url, REDIS_URL)
    api_key, sessions = seed_sessions(21)
    with daphne(database_url, REDIS_URL=REDIS_URL) as port:
        throughputs = [
            measure_api(port, api_key, sessions, writers, batch, arguments.seconds)
            for writers in (1, 20)
            for batch in (1, 10)
        ]
        fanout = asyncio.run(measure_fanout(port, api_key, sessions[20], arguments.streams, arguments.events))
    report = render(throughputs, fanout, arguments.streams, arguments.events)
    RESULTS_FILE.write_text(report)
    print(report)


if __name__ == "__main__":
    main()
