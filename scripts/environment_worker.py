"""The self-hosted environment worker process: the reference client's own `EnvironmentWorker`
(`anthropic.lib.environments`, unmodified) polling one `self_hosted` environment of the registry and
running its sessions' built-in tools here, one work item at a time.

Configured by the environment, as the reference client reads it:
  ANTHROPIC_BASE_URL         the registry's root URL
  ANTHROPIC_ENVIRONMENT_ID   the environment to serve (env_...)
  ANTHROPIC_ENVIRONMENT_KEY  its environment key (sk-env-..., minted by `manage.py environment_key mint`)
  WORKER_WORKDIR             where sessions' files and skills go (default: the current directory)
  WORKER_ID                  the id `stats` counts (default: the SDK's hostname-based one)
  WORKER_MAX_IDLE            seconds a finished turn's session is kept before its item is let go (60)
  WORKER_MEMORY_SYNC_SECONDS how often memory stores are synced back (15; at least 5)
It needs no Django, no database and no privilege: only the `anthropic` package and the registry's URL.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys

import anthropic
from anthropic.lib.environments import DEFAULT_MAX_IDLE, DEFAULT_MEMORY_SYNC_INTERVAL, EnvironmentWorker


def required(name: str) -> str:
    value = os.environ.get(name, "")
    if not value:
        sys.exit(f"environment_worker: {name} is not set (see this script's docstring)")
    return value


def build_worker() -> EnvironmentWorker:
    # The environment key is the only credential: the worker sends it (or a work item's own token) as Bearer.
    client = anthropic.AsyncAnthropic(base_url=required("ANTHROPIC_BASE_URL"), api_key="unused")
    return EnvironmentWorker(
        client,
        environment_id=required("ANTHROPIC_ENVIRONMENT_ID"),
        environment_key=required("ANTHROPIC_ENVIRONMENT_KEY"),
        workdir=os.environ.get("WORKER_WORKDIR") or os.getcwd(),
        worker_id=os.environ.get("WORKER_ID") or None,
        max_idle=float(os.environ.get("WORKER_MAX_IDLE") or DEFAULT_MAX_IDLE),
        memory_sync_interval=float(os.environ.get("WORKER_MEMORY_SYNC_SECONDS") or DEFAULT_MEMORY_SYNC_INTERVAL),
    )


async def serve(worker: EnvironmentWorker) -> None:
    """Run until SIGTERM or SIGINT. The reference worker then ends the item in hand (its commands killed, its
    memory flushed) and stops it; the registry queues the session again if a call was left unanswered."""
    task = asyncio.create_task(worker.run())
    loop = asyncio.get_running_loop()
    for stop_signal in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(stop_signal, task.cancel)
    logging.getLogger("environment_worker").info("polling %s", os.environ["ANTHROPIC_ENVIRONMENT_ID"])
    with contextlib.suppress(asyncio.CancelledError):
        await task


def main() -> None:
    logging.basicConfig(
        level=os.environ.get("WORKER_LOG_LEVEL", "INFO"), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    asyncio.run(serve(build_worker()))


if __name__ == "__main__":
    main()
