"""`python -m bench.registry`: 10,000 agents in one workspace on PostgreSQL, read through daphne on loopback.

Measures client-side p50/p99 of one agent and of a list page of 20 over keep-alive HTTP, counts the SQL
queries of the same requests in-process for page sizes 1, 20 and 100, and writes RESULTS.md beside this file.
"""

from __future__ import annotations

import argparse
import http.client
import time
from dataclasses import dataclass
from pathlib import Path

from bench.common import daphne, machine_description, p50_p99_mean, recreate_database, setup_django

DATABASE_NAME = "registry_bench"
AGENT_COUNT = 10_000
PAGE_SIZES = (1, 20, 100)
RESULTS_FILE = Path(__file__).with_name("RESULTS.md")
SETUP = [
    "- Server: `python -m daphne settings.asgi:application` (settings.base, pooled connections, no Redis)",
    "- Client: `http.client` on one keep-alive connection, sequential requests, header `x-api-key`",
]


@dataclass(frozen=True)
class Latency:
    """Client-side timings of one request shape, in milliseconds."""

    name: str
    path: str
    p50: float
    p99: float
    mean: float
    requests: int


# -- database ---------------------------------------------------------------------------------


def seed_agents(count: int) -> tuple[str, str, str]:
    """One workspace with `count` agents; returns (api_key, workspace id, id of one agent)."""
    from django.db import connection

    from registry.agents.models import Agent, AgentVersion
    from registry.agents.services import build_spec
    from registry.workspaces.services import workspace_create

    workspace, issued = workspace_create(name="bench")
    agents = [
        Agent(workspace=workspace, name=f"agent-{index}", spec=spec)
        for index in range(count)
        for spec in [bench_spec(build_spec, index)]
    ]
    Agent.objects.bulk_create(agents, batch_size=1000)
    AgentVersion.objects.bulk_create(
        [AgentVersion(agent=agent, version=1, spec=agent.spec) for agent in agents], batch_size=1000
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")  # as autovacuum would have: planner statistics for the bulk-loaded rows
    return issued.plaintext, workspace.id, agents[count // 2].id


def bench_spec(build_spec: object, index: int) -> dict[str, object]:
    """A realistic definition: a system prompt, the built-in toolset and one custom tool."""
    values = {
        "name": f"agent-{index}",
        "model": {"id": "claude-sonnet-4-5", "effort": {"type": "high"}, "inference_geo": None, "speed": "standard"},
        "system": "You are a careful assistant. " * 20,
        "tools": [
            {"type": "agent_toolset_20260401"},
            {
                "type": "custom",
                "name": "lookup",
                "description": "Look a record up.",
                "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}},
            },
        ],
        "metadata": {"team": "bench", "index": str(index)},
    }
    return build_spec(values)  # type: ignore[operator, no-any-return]


# -- queries per request (in-process) ---------------------------------------------------------


def count_queries(api_key: str, path: str) -> int:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_X_API_KEY=api_key)
    client.get(path)  # the first request may refresh the key's last_used_at; count a steady one
    with CaptureQueriesContext(connection) as captured:
        response = client.get(path)
    assert response.status_code == 200, response.content
    return len(captured.captured_queries)


# -- latency through daphne -------------------------------------------------------------------


def measure(port: int, api_key: str, name: str, path: str, requests: int, warmup: int) -> Latency:
    """Sequential GETs on one keep-alive connection; each timing includes reading the whole body."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    headers = {"x-api-key": api_key}
    timings: list[float] = []
    for index in range(warmup + requests):
        started = time.perf_counter()
        connection.request("GET", path, headers=headers)
        response = connection.getresponse()
        response.read()
        elapsed = (time.perf_counter() - started) * 1000
        if response.status != 200:
            raise RuntimeError(f"{path} answered {response.status}")
        if index >= warmup:
            timings.append(elapsed)
    connection.close()
    return Latency(name, path, *p50_p99_mean(timings), requests)


# -- report -----------------------------------------------------------------------------------


def render(latencies: list[Latency], queries: dict[str, dict[int, int]]) -> str:
    lines = ["# Registry benchmark", "", *machine_description(), *SETUP, ""]
    lines += [f"{AGENT_COUNT:,} agents in one workspace.", "", "## Latency at the client (loopback)", ""]
    lines += ["| request | requests | p50 ms | p99 ms | mean ms |", "|---|---|---|---|---|"]
    lines += [
        f"| {item.name} (`{item.path}`) | {item.requests} | {item.p50:.2f} | {item.p99:.2f} | {item.mean:.2f} |"
        for item in latencies
    ]
    lines += ["", "## SQL queries per request (in-process, DRF test client)", ""]
    lines += ["| request | " + " | ".join(f"limit={size}" for size in PAGE_SIZES) + " |"]
    lines += ["|---|" + "---|" * len(PAGE_SIZES)]
    lines += [
        f"| {name} | " + " | ".join(str(counts[size]) for size in PAGE_SIZES) + " |" for name, counts in queries.items()
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--agents", type=int, default=AGENT_COUNT)
    arguments = parser.parse_args()

    database_url = recreate_database(DATABASE_NAME)
    setup_django(database_url)
    api_key, _, agent_id = seed_agents(arguments.agents)
    one_agent, list_page = f"/v1/agents/{agent_id}", "/v1/agents?limit=20"
    queries = {
        "GET one agent": {size: count_queries(api_key, one_agent) for size in PAGE_SIZES},
        "GET agent list page": {size: count_queries(api_key, f"/v1/agents?limit={size}") for size in PAGE_SIZES},
    }
    with daphne(database_url) as port:
        latencies = [
            measure(port, api_key, "GET one agent", one_agent, arguments.requests, arguments.warmup),
            measure(port, api_key, "GET list page of 20", list_page, arguments.requests, arguments.warmup),
        ]
    report = render(latencies, queries)
    RESULTS_FILE.write_text(report)
    print(report)


if __name__ == "__main__":
    main()
