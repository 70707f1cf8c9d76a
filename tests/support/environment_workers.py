"""Self-hosted environments end to end: the reference client's own `EnvironmentWorker` run as a child process
(`scripts/environment_worker.py`, the deployment's entry point) against a live registry, environment keys, and
self-hosted sessions driven through the SDK with the plan model (`fakes.plan_model`).

Each worker runs in a private mount namespace with a tmpfs at `/mnt/memory`, where the reference worker
mounts memory stores (their absolute mount paths): what it writes there never reaches the host.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import anthropic

from fakes.plan_model import plan
from fakes.waiting import wait_until
from registry.environments import services as environment_services
from registry.environments.models import Environment
from registry.sessions.models import WorkItem
from tests.support.processes import Process
from tests.support.runtime.sessions import Conversation, stop_reasons

MODEL = "claude-test-model"
TOOLSET: Any = {"type": "agent_toolset_20260401"}
# A private /mnt/memory for the worker, then the worker itself ("$0" "$@": the interpreter and the script).
PRIVATE_MEMORY_MOUNT = 'mkdir -p /mnt/memory && mount -t tmpfs -o mode=0755 worker-memory /mnt/memory && exec "$0" "$@"'


def mint_key(environment_id: str) -> str:
    """A new environment key's plaintext (as `manage.py environment_key mint` prints it)."""
    environment = Environment.objects.get(pk=environment_id)
    return environment_services.environment_key_mint(environment=environment, name="test").plaintext


def start_environment_worker(
    registry_url: str, environment_id: str, key: str, *, directory: Path, name: str, **settings: str
) -> Process:
    """The worker process, once it polls; its working directory is `directory/name`, its log `directory/name.log`."""
    workdir = directory / name
    workdir.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "ANTHROPIC_BASE_URL": registry_url,
        "ANTHROPIC_ENVIRONMENT_ID": environment_id,
        "ANTHROPIC_ENVIRONMENT_KEY": key,
        "WORKER_WORKDIR": str(workdir),
        "WORKER_ID": name,
        "WORKER_MAX_IDLE": "2",
        "WORKER_MEMORY_SYNC_SECONDS": "5",
        "PYTHONUNBUFFERED": "1",
        **settings,
    }
    command = ["unshare", "--mount", "--propagation", "private", "sh", "-c", PRIVATE_MEMORY_MOUNT]
    command += [sys.executable, "scripts/environment_worker.py"]
    process = Process(command, env=env, log=directory / f"{name}.log")

    def polling() -> bool:
        if process.popen.poll() is not None:
            raise AssertionError(f"the environment worker exited:\n{process.log_tail()}")
        return "polling" in process.log.read_text(errors="replace")

    wait_until(polling, timeout=60, what="the environment worker to poll")
    return process


@dataclass
class SelfHosted:
    """A self-hosted environment of the test's workspace, its key, and sessions on it."""

    sdk: anthropic.Anthropic
    registry_url: str
    directory: Path
    environment_id: str = ""
    key: str = ""
    processes: list[Process] = field(default_factory=list)
    workers: dict[str, Process] = field(default_factory=dict)

    def __post_init__(self) -> None:
        made = self.sdk.beta.environments.create(name="workers", config={"type": "self_hosted"})
        self.environment_id = made.id
        self.key = mint_key(made.id)

    def start_worker(self, name: str, **settings: str) -> Process:
        worker = start_environment_worker(
            self.registry_url, self.environment_id, self.key, directory=self.directory, name=name, **settings
        )
        self.workers[name] = worker
        return worker

    def workdir(self, name: str) -> Path:
        return self.directory / name

    def open(self, *, resources: list[dict[str, Any]] | None = None, **agent: Any) -> Conversation:
        """A session of an agent with the built-in toolset (or `tools=`) on this environment."""
        agent.setdefault("tools", [TOOLSET])
        created = self.sdk.beta.agents.create(name="worker-agent", model=MODEL, **agent)
        session = self.sdk.beta.sessions.create(
            agent=created.id, environment_id=self.environment_id, resources=cast(Any, resources or [])
        )
        return Conversation(self.sdk, session.id, [*self.processes, *self.workers.values()])

    def stop(self) -> None:
        for worker in self.workers.values():
            worker.stop()


def ask(chat: Conversation, *calls: tuple[str, dict[str, Any]]) -> str:
    """Send the plan of these tool calls as the user's message."""
    return chat.say(plan(*calls))


def wait_finished(chat: Conversation, turns: int = 1, timeout: float = 60) -> list[dict[str, Any]]:
    """The events once `turns` turns ended (an idle that is not `requires_action`)."""

    def finished(events: list[dict[str, Any]]) -> bool:
        return sum(reason != "requires_action" for reason in stop_reasons(events)) >= turns

    return chat.wait_for(finished, timeout=timeout)


def items_of(session_id: str) -> list[WorkItem]:
    return list(WorkItem.objects.filter(session_ref=session_id).order_by("created_at"))


def wait_item_state(session_id: str, state: str, timeout: float = 30) -> WorkItem:
    """The session's latest work item, once it is in `state`."""

    def reached() -> WorkItem | None:
        items = items_of(session_id)
        return items[-1] if items and items[-1].state == state else None

    wait_until(lambda: reached() is not None, timeout=timeout, what=f"the work item to be {state}")
    item = reached()
    assert item is not None
    return item
