"""`make run` (`manage.py up`) on a fresh data folder, with every port it binds moved by its flags, and the
README's walkthrough (`examples/walkthrough.py`) run against it: the gateway with the provider key from
the `demo` vault, the registry's runtime pointed at it, an environment, an agent with the toolset, a
session with a repository, a message and the stream to the end. The provider is the scripted model on
loopback (the walkthrough's gateway config differs from the one `make run` uses only by its `base_url`),
and github.com is a git server on loopback by an `insteadOf` rewrite."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anthropic
import httpx
import pytest
import yaml

from fakes import model as replies
from fakes.git_server import GitServer
from fakes.model import FakeModel
from fakes.plan_model import PlanModel, plan
from fakes.waiting import wait_until
from tests.support.environment_workers import start_environment_worker
from tests.support.live import ROOT, free_port, wait_until_up
from tests.support.sandbox_roots import traversable_root

pytestmark = [pytest.mark.e2e]
KEY_LINE = re.compile(r"Key \(shown once\): (sk-env-\S+)")

DEMO_CONFIG = ROOT / "examples" / "gateway" / "demo.yaml"
PROVIDER_KEY = "sk-walkthrough-provider-key"
DEMO_KEY = re.compile(r"Demo API key \(shown once, send it as x-api-key\): (\S+)")


@dataclass(frozen=True)
class Running:
    """`manage.py up` started on free ports; its output goes to `log`."""

    process: subprocess.Popen[bytes]
    log: Path
    registry: int
    gateway: int
    admin: int
    triggers: int

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def demo_key(self) -> str:
        found = wait_until(lambda: DEMO_KEY.search(self.output()), timeout=60, what="the demo key")
        return found.group(1)

    def wait_up(self) -> None:
        for port in (self.registry, self.admin, self.triggers):
            wait_until_up(f"http://127.0.0.1:{port}/healthz", self.process, timeout=60)


@contextlib.contextmanager
def make_run(data: Path, *arguments: str, **environment: str) -> Iterator[Running]:
    """`manage.py up` with SQLite in `data` (not made yet, as in a fresh clone), no Redis, and every port moved."""
    registry, gateway, admin, triggers = (free_port() for _ in range(4))
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "settings.base",
        "DATABASE_URL": "",
        "REDIS_URL": "",
        "REGISTRY_DATA_DIR": str(data),
        "REGISTRY_PORT": str(registry),
        **environment,
    }
    env.pop("REGISTRY_MODEL_BASE_URL", None)
    ports = [
        f"--gateway-port={gateway}",
        f"--gateway-admin-port={admin}",
        "--sessions-health-port=off",
        f"--triggers-health-port={triggers}",
    ]
    log = data.parent / "up.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [sys.executable, "manage.py", "up", *ports, *arguments],
            cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    running = Running(process, log, registry, gateway, admin, triggers)
    try:
        yield running
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def test_up_binds_the_ports_it_is_given_on_a_fresh_data_folder(tmp_path: Path) -> None:
    with make_run(tmp_path / "var") as running:
        running.wait_up()
        answer = httpx.post(f"http://127.0.0.1:{running.gateway}/v1/messages", json={}, timeout=5)
        assert answer.status_code in (400, 401, 404, 422), answer.text  # the gateway's data plane answered
        assert (tmp_path / "var" / "registry.sqlite3").exists()
        output = running.output()
    assert f"Registry: http://127.0.0.1:{running.registry}" in output
    assert f"Gateway: http://127.0.0.1:{running.gateway}" in output


@pytest.fixture
def sandbox_root() -> Iterator[Path]:
    """A sandbox root every session uid can traverse to (pytest's own temporary folders are 0700)."""
    with traversable_root("walkthrough-") as root:
        yield root


def walkthrough_gateway_config(path: Path, model: FakeModel | PlanModel) -> Path:
    """`make run`'s gateway config with vendor B's `base_url` at the scripted model: the only change."""
    document = yaml.safe_load(DEMO_CONFIG.read_text())
    document["destinations"]["vendor_b"]["base_url"] = model.url
    path.write_text(yaml.safe_dump(document))
    return path


def test_the_readme_walkthrough_runs_to_the_end(tmp_path: Path, sandbox_root: Path) -> None:
    model = FakeModel()
    github = GitServer(token=None)
    try:
        project = github.create_repository("pallets/itsdangerous")
        project.commit({"README.md": "Various helpers to pass data to untrusted environments.\n", "setup.py": ""})
        git_config = tmp_path / "gitconfig"
        git_config.write_text(f'[url "{github.url}/"]\n\tinsteadOf = https://github.com/\n')
        model.add(
            replies.tool_call("bash", {"command": "ls /workspace/project"}),
            replies.text("It signs data so it can travel through untrusted places."),
        )
        gateway_config = walkthrough_gateway_config(tmp_path / "gateway.yaml", model)
        environment = {
            "VAULT__DEMO__VENDOR_B": PROVIDER_KEY,
            "GIT_CONFIG_GLOBAL": str(git_config),
            "GIT_CONFIG_NOSYSTEM": "1",
            "REGISTRY_SANDBOX_ROOT": str(sandbox_root),
        }
        with make_run(tmp_path / "var", f"--gateway-config={gateway_config}", **environment) as running:
            key = running.demo_key()
            running.wait_up()
            walked = subprocess.run(
                [sys.executable, "examples/walkthrough.py"],
                cwd=ROOT,
                env={**os.environ, "REGISTRY_URL": f"http://127.0.0.1:{running.registry}", "REGISTRY_API_KEY": key},
                capture_output=True,
                text=True,
                timeout=180,
            )
        assert walked.returncode == 0, walked.stdout + walked.stderr + running.output()[-3000:]
        lines = walked.stdout.splitlines()
        assert "tool call: bash {'command': 'ls /workspace/project'}" in lines
        assert "tool result: README.md\nsetup.py\nexit code: 0" in walked.stdout
        assert "agent: It signs data so it can travel through untrusted places." in lines
        assert lines[-1] == "idle: end_turn"
        first, second = model.requests
        assert first.headers["x-api-key"] == PROVIDER_KEY  # the vault's key reached the provider
        assert "/workspace/project: a clone of https://github.com/pallets/itsdangerous" in str(first.body["system"])
        assert second.body["messages"][-1]["content"][0]["type"] == "tool_result"
    finally:
        model.stop()
        github.stop()


def test_the_readme_self_hosted_walkthrough_reaches_a_running_worker(tmp_path: Path) -> None:
    """README "Self-hosted environments": an environment over the API, a key from `manage.py environment_key
    mint`, `scripts/environment_worker.py` with the three variables, and a session whose bash call it runs."""
    model = PlanModel()
    try:
        gateway_config = walkthrough_gateway_config(tmp_path / "gateway.yaml", model)
        data = tmp_path / "var"
        with make_run(data, f"--gateway-config={gateway_config}", VAULT__DEMO__VENDOR_B=PROVIDER_KEY) as running:
            api_key = running.demo_key()
            running.wait_up()
            registry = f"http://127.0.0.1:{running.registry}"
            headers = {"x-api-key": api_key}
            body = {"name": "my-machines", "config": {"type": "self_hosted"}}
            environment_id = httpx.post(f"{registry}/v1/environments", json=body, headers=headers).json()["id"]
            settings = {"DJANGO_SETTINGS_MODULE": "settings.base", "DATABASE_URL": "", "REGISTRY_DATA_DIR": str(data)}
            minted = subprocess.run(
                [sys.executable, "manage.py", "environment_key", "mint", environment_id, "--name", "laptop"],
                cwd=ROOT, env={**os.environ, **settings}, capture_output=True, text=True, check=True,
            )  # fmt: skip
            found = KEY_LINE.search(minted.stdout)
            assert found is not None, minted.stdout
            worker = start_environment_worker(
                registry, environment_id, found.group(1), directory=tmp_path, name="laptop"
            )
            try:
                client = anthropic.Anthropic(base_url=registry, api_key=None, default_headers=headers)
                agent = client.beta.agents.create(name="a", model="m", tools=[{"type": "agent_toolset_20260401"}])
                session = client.beta.sessions.create(agent=agent.id, environment_id=environment_id)
                text = plan(("bash", {"command": "echo hello from my machine > proof && cat proof"}))
                client.beta.sessions.events.send(
                    session.id, events=[{"type": "user.message", "content": [{"type": "text", "text": text}]}]
                )

                def finished() -> bool:
                    events = client.beta.sessions.events.list(session.id, limit=1000)
                    return any(
                        event.type == "session.status_idle" and event.stop_reason.type == "end_turn" for event in events
                    )

                wait_until(finished, timeout=90, what="the session to finish on the worker")
            finally:
                worker.stop()
        assert (tmp_path / "laptop" / "proof").read_text() == "hello from my machine\n"
    finally:
        model.stop()
