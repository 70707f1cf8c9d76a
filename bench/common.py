"""Pieces every registry benchmark shares: a scratch PostgreSQL database, Django set-up, daphne on a
loopback port, a `runsessions` worker, percentiles and the machine description."""

from __future__ import annotations

import http.client
import os
import platform
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import psycopg

SERVER_URL = "postgres://postgres@127.0.0.1:5432"
PROJECT_ROOT = Path(__file__).resolve().parents[1]


def recreate_database(name: str) -> str:
    """A fresh, empty scratch database; returns its URL."""
    with psycopg.connect(f"{SERVER_URL}/postgres", autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        connection.execute(f'CREATE DATABASE "{name}"')
    return f"{SERVER_URL}/{name}"


def setup_django(database_url: str, redis_url: str | None = None) -> None:
    """Configure this process on the bench database and migrate it."""
    os.environ["DATABASE_URL"] = database_url
    if redis_url:
        os.environ["REDIS_URL"] = redis_url
    else:
        os.environ.pop("REDIS_URL", None)
    os.environ["DJANGO_SETTINGS_MODULE"] = "settings.base"
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextmanager
def daphne(database_url: str, **environment: str) -> Iterator[int]:
    """The registry under daphne on a loopback port (settings.base), until the block ends."""
    port = free_port()
    env = {**os.environ, "DATABASE_URL": database_url, "DJANGO_SETTINGS_MODULE": "settings.base", **environment}
    if "REDIS_URL" not in environment:
        env.pop("REDIS_URL", None)
    command = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "settings.asgi:application"]
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}  # daphne logs every request
    process = subprocess.Popen(command, cwd=PROJECT_ROOT, env=env, **quiet)
    try:
        wait_until_healthy(port)
        yield port
    finally:
        process.terminate()
        process.wait(timeout=10)


@contextmanager
def runsessions(
    database_url: str, model_url: str, concurrency: int, **environment: str
) -> Iterator[subprocess.Popen[bytes]]:
    """A `runsessions` worker (settings.base) on the bench database and the model at `model_url`, started and
    running until the block ends; `environment` adds variables."""
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "DJANGO_SETTINGS_MODULE": "settings.base",
        "REGISTRY_MODEL_BASE_URL": model_url,
        "REGISTRY_RUNTIME_CONCURRENCY": str(concurrency),
        **environment,
    }
    command = [sys.executable, "manage.py", "runsessions"]
    process = subprocess.Popen(command, cwd=PROJECT_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert process.stdout is not None
    for line in process.stdout:  # "runtime worker ... started"
        if b"started" in line:
            break
    threading.Thread(target=process.stdout.read, daemon=True).start()
    try:
        yield process
    finally:
        process.terminate()
        process.wait(timeout=30)


def wait_until_healthy(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            connection.request("GET", "/healthz")
            if connection.getresponse().status == 200:
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("daphne did not become healthy")


def p50_p99_mean(timings: list[float]) -> tuple[float, float, float]:
    percentiles = statistics.quantiles(timings, n=100)
    return statistics.median(timings), percentiles[98], statistics.fmean(timings)


def machine_description() -> list[str]:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if "model name" in line
        ),
        platform.processor() or "unknown",
    )
    with psycopg.connect(f"{SERVER_URL}/postgres") as connection:
        row = connection.execute("SHOW server_version").fetchone()
    load = os.getloadavg()[0]
    return [
        f"- Date: {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}; load average at the end {load:.2f}",
        f"- CPU: {cpu}, {os.cpu_count()} logical cores; OS: {platform.platform()}",
        f"- Python {platform.python_version()}, PostgreSQL {row[0] if row else '?'} on 127.0.0.1 (same machine)",
    ]


def seed_sessions(session_count: int) -> tuple[str, list[str]]:
    """A workspace with one agent and environment and `session_count` idle sessions; (key, session ids)."""
    from registry.agents.services import agent_create
    from registry.environments.services import environment_create
    from registry.sessions.services import session_create
    from registry.workspaces.services import workspace_create

    workspace, issued = workspace_create(name="bench")
    agent = agent_create(workspace=workspace, values={"name": "bench", "model": "claude-sonnet-4-5"})
    environment = environment_create(workspace=workspace, values={"name": "bench"})
    sessions = [
        session_create(workspace=workspace, values={"agent": {"id": agent.id}, "environment_id": environment.id}).id
        for _ in range(session_count)
    ]
    return issued.plaintext, sessions
