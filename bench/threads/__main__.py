"""`python -m bench.threads`: multi-agent sessions on one runtime worker (issue 27).

50 sessions, each an orchestrator that spawns 4 child threads of a predefined agent and waits for their
replies; every child's model call takes 2 s (the plan model on loopback, in this process). All 50 turns
start at once. Effective concurrency = children x 2 s / wall time of the whole batch; the orchestrators'
own model calls (3 per session: the spawns in one answer, the wait, the final answer; answered at once) are
not counted in it. The peak is the most child model calls in flight at once.

PostgreSQL (LISTEN/NOTIFY wake-ups) and the Redis channel layer; writes RESULTS.md beside this file.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from pathlib import Path

from bench.common import daphne, machine_description, recreate_database, runsessions, setup_django
from bench.runtime.__main__ import post_event, post_text, wait_idle
from fakes.plan_model import PlanModel, plan

DATABASE_NAME = "registry_bench_threads"
REDIS_URL = "redis://127.0.0.1:6379/7"
RESULTS_FILE = Path(__file__).with_name("RESULTS.md")
MODEL_SECONDS = 2.0


def seed(session_count: int) -> tuple[str, list[str]]:
    """A workspace whose orchestrator may spawn the `specialist` agent, and its idle sessions."""
    from registry.agents.multiagent import parse
    from registry.agents.services import agent_create
    from registry.environments.services import environment_create
    from registry.sessions.services import session_create
    from registry.workspaces.services import workspace_create

    workspace, issued = workspace_create(name="bench")
    specialist = agent_create(workspace=workspace, values={"name": "specialist", "model": "claude-sonnet-4-5"})
    roster = {"type": "enabled", "predefined_agents": [specialist.id]}
    multiagent = parse({"type": "multiagent_20261001", "subagents": roster})  # as the API's serializer does
    orchestrator = agent_create(
        workspace=workspace, values={"name": "orchestrator", "model": "claude-sonnet-4-5", "multiagent": multiagent}
    )
    environment = environment_create(workspace=workspace, values={"name": "bench"})
    values = {"agent": {"id": orchestrator.id}, "environment_id": environment.id}
    return issued.plaintext, [session_create(workspace=workspace, values=values).id for _ in range(session_count)]


def run_batch(port: int, api_key: str, sessions: list[str], children: int) -> float:
    """Start every session's turn at once; the wall time until all are idle."""
    spawns = [
        ("spawn_agent", {"agent": "specialist", "message": f"slow:{MODEL_SECONDS}:part {n}"}) for n in range(children)
    ]
    text = plan(spawns, ("wait_for_replies", {}))  # the spawns in one answer of the model, as a model makes them
    started = time.monotonic()
    posters = [threading.Thread(target=post_text, args=(port, api_key, session, text)) for session in sessions]
    for poster in posters:
        poster.start()
    for poster in posters:
        poster.join()
    wait_idle(sessions, len(sessions), timeout=600)
    return time.monotonic() - started


def children_in(session_id: str, status: str) -> int:
    from django.db import connection

    from registry.sessions.models import SessionThread

    count = SessionThread.objects.filter(session_id=session_id, status=status).count()
    connection.close()
    return count


def wait_children(session_id: str, status: str, count: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while children_in(session_id, status) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"session {session_id}: {count} children never became {status}")
        time.sleep(0.005)


def interrupt_latencies(port: int, api_key: str, sessions: list[str], children: int) -> list[float]:
    """Per session, one at a time: its children all in a minute-long model call, then `user.interrupt`; the ms
    until every child is idle (halted)."""
    spawns = [("spawn_agent", {"agent": "specialist", "message": f"slow:60:part {n}"}) for n in range(children)]
    text = plan(spawns, ("wait_for_replies", {}))
    latencies = []
    for session in sessions:
        post_text(port, api_key, session, text)
        wait_children(session, "running", children)
        started = time.monotonic()
        post_event(port, api_key, session, {"type": "user.interrupt"})
        wait_children(session, "idle", children)
        latencies.append((time.monotonic() - started) * 1000)
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--children", type=int, default=4)
    parser.add_argument("--interrupts", type=int, default=20)
    arguments = parser.parse_args()

    database_url = recreate_database(DATABASE_NAME)
    setup_django(database_url, REDIS_URL)
    api_key, sessions = seed(arguments.sessions + arguments.interrupts)
    sessions, interrupted = sessions[: arguments.sessions], sessions[arguments.sessions :]
    model = PlanModel()
    with (
        daphne(database_url, REDIS_URL=REDIS_URL) as port,
        runsessions(database_url, model.url, arguments.sessions, REDIS_URL=REDIS_URL, DATABASE_POOL_SIZE="40"),
    ):
        elapsed = run_batch(port, api_key, sessions, arguments.children)
        latencies = interrupt_latencies(port, api_key, interrupted, 3)
        model.aborted.set()  # the halted children's minute-long answers are not waited for
    model.stop()
    threads = arguments.sessions * arguments.children
    report = "\n".join(
        [
            "# Multi-agent sessions benchmark",
            "",
            *machine_description(),
            "- Registry: one daphne process (PostgreSQL, Redis channel layer); one `runsessions` worker",
            f"  (concurrency {arguments.sessions})",
            "- Model: the plan model on loopback, in the benchmark's process; each child's call takes "
            f"{MODEL_SECONDS:.0f} s",
            "",
            f"## {arguments.sessions} sessions x {arguments.children} child threads, all started at once",
            "",
            f"Wall time {elapsed:.1f} s; effective concurrency {threads * MODEL_SECONDS / elapsed:.1f} threads "
            f"({len(model.requests)} model requests); at the peak {model.peak} model calls were in flight at once.",
            "",
            f"## Interrupt: {arguments.interrupts} sessions, one at a time, each with 3 children in a model call",
            "",
            "From `POST user.interrupt` to every child thread idle (halted), in ms:",
            "",
            "| p50 | mean | max |",
            "|---|---|---|",
            f"| {statistics.median(latencies):.0f} | {statistics.fmean(latencies):.0f} | {max(latencies):.0f} |",
        ]
    )
    RESULTS_FILE.write_text(report + "\n")
    print(report)


if __name__ == "__main__":
    main()
