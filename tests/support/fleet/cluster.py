"""The fleet of the end-to-end test: 2 registries (daphne) and 2 gateways (`rungateway --database`) behind
nginx, 2 runtime workers, 2 trigger schedulers, a private Redis, an echo model; and a client of the registry
that keeps itself whole across a replica's death (Idempotency-Key retries, SSE resumption by Last-Event-ID)."""

from __future__ import annotations

import contextlib
import functools
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

from fakes.balancer import Pool, nginx
from fakes.waiting import wait_until
from tests.support.fleet.children import Child, EchoModel, listening_ports
from tests.support.live import free_port, private_redis, test_database_url

MODEL = "claude-fleet"
PYTHON = sys.executable


def gateway_document(model_url: str) -> dict[str, Any]:
    """The stored gateway config: both listeners on port 0 (two replicas on one host each bind their own
    ports; the test reads them from /proc), sessions' model calls routed to the echo model."""
    return {
        "server": {"listen": "127.0.0.1:0", "admin_listen": "127.0.0.1:0", "limits": {"drain_timeout_ms": 5000}},
        "vaults": [{"name": "v", "resolver": "env", "env_var": "PATH"}],
        "destinations": {"model": {"kind": "vendor_b", "base_url": model_url, "credentials": {"vault": "v"}}},
        "routes": [
            {
                "name": "sessions",
                "match": {"model": MODEL},
                "strategy": {"mode": "fallback", "targets": [{"destination": "model"}]},
            }
        ],
    }


@dataclass
class Gateway:
    """A `rungateway --database` replica and the ports it bound."""

    child: Child
    url: str
    admin_url: str


def discover_gateway(child: Child) -> Gateway:
    """The data and admin ports of a gateway that bound port 0: the admin plane answers `/readyz`."""
    ports = wait_until(
        lambda: child.alive() and len(found := listening_ports(child.pid)) >= 2 and found,
        timeout=90,
        what=f"{child.name} to listen",
    )

    def ready(port: int) -> bool:
        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200
        return False

    admin = wait_until(lambda: next((port for port in ports if ready(port)), None), what=f"{child.name} ready")
    (data,) = ports - {admin}
    return Gateway(child=child, url=f"http://127.0.0.1:{data}", admin_url=f"http://127.0.0.1:{admin}")


@dataclass
class Fleet:
    """Everything the fleet test started, by role; `stop` ends all of it."""

    log_dir: Path
    env: dict[str, str]
    model: EchoModel
    registries: list[tuple[Child, int]] = field(default_factory=list)  # (process, port)
    gateways: list[Gateway] = field(default_factory=list)
    workers: list[Child] = field(default_factory=list)
    schedulers: list[Child] = field(default_factory=list)
    registry_url: str = ""
    gateway_url: str = ""

    def children(self) -> list[Child]:
        return [
            *(child for child, _ in self.registries),
            *(gateway.child for gateway in self.gateways),
            *self.workers,
            *self.schedulers,
        ]

    def tails(self) -> str:
        return "\n".join(child.tail() for child in self.children())

    def stop(self) -> None:
        for child in self.children():
            child.stop()

    def registry_on(self, upstream: str) -> Child:
        port = int(upstream.rsplit(":", 1)[1])
        return next(child for child, bound in self.registries if bound == port)

    def worker_with_pid(self, pid: int) -> Child:
        return next(worker for worker in self.workers if worker.pid == pid)


@contextlib.contextmanager
def running_fleet(log_dir: Path, environment: dict[str, str], model: EchoModel) -> Iterator[Fleet]:
    """Start the fleet on the test database, whose gateway config routes to `model` (stored already); stop
    all of it at the end."""
    with contextlib.ExitStack() as stack:
        redis_url = stack.enter_context(private_redis()).url
        env = {
            **environment,
            "DJANGO_SETTINGS_MODULE": "tests.support.subprocess_settings",
            "DATABASE_URL": test_database_url(),
            "REDIS_URL": redis_url,
            "REGISTRY_HEALTH_PORT": "0",  # several workers and schedulers on one host
            "IDEMPOTENCY_STALE_SECONDS": "10",  # a claim whose registry died is free again after 10 s
            "PYTHONUNBUFFERED": "1",
        }
        fleet = Fleet(log_dir=log_dir, env=env, model=model)
        stack.callback(fleet.stop)
        gateway_children = [
            Child(f"gateway-{index}", [PYTHON, "manage.py", "rungateway", "--database"], env=env, log_dir=log_dir)
            for index in range(2)
        ]
        fleet.gateways = [discover_gateway(child) for child in gateway_children]
        for index in range(2):
            port = free_port()
            daphne = [PYTHON, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "settings.asgi:application"]
            fleet.registries.append((Child(f"registry-{index}", daphne, env=env, log_dir=log_dir), port))
        registry_pool = Pool("registry", free_port(), tuple(f"127.0.0.1:{port}" for _, port in fleet.registries))
        gateway_pool = Pool(
            "gateway",
            free_port(),
            tuple(gateway.url.removeprefix("http://") for gateway in fleet.gateways),
            read_timeout="300s",
        )
        stack.enter_context(nginx([registry_pool, gateway_pool]))
        fleet.registry_url = f"http://127.0.0.1:{registry_pool.port}"
        fleet.gateway_url = f"http://127.0.0.1:{gateway_pool.port}"
        worker_env = {**env, "REGISTRY_MODEL_BASE_URL": fleet.gateway_url, "REGISTRY_MODEL_API_KEY": "fleet-key"}
        worker = [PYTHON, "manage.py", "runsessions", "--lease-seconds", "2", "--poll-seconds", "0.5"]
        fleet.workers = [Child(f"worker-{index}", worker, env=worker_env, log_dir=log_dir) for index in range(2)]
        scheduler = [PYTHON, "manage.py", "runtriggers", "--poll-seconds", "0.5"]
        fleet.schedulers = [Child(f"scheduler-{index}", scheduler, env=env, log_dir=log_dir) for index in range(2)]
        for _, port in fleet.registries:
            url = f"http://127.0.0.1:{port}/healthz"
            wait_until(functools.partial(healthy, url), timeout=90, what="a registry")
        for child in fleet.workers:
            child.wait_for_line("started")
        for child in fleet.schedulers:
            child.wait_for_line("trigger scheduler started")
        yield fleet


def healthy(url: str) -> bool:
    with contextlib.suppress(httpx.HTTPError):
        return httpx.get(url, timeout=2).status_code == 200
    return False


class RegistryClient:
    """The registry through the balancer. A write carries an Idempotency-Key and is sent again, with the
    same key, when the answer is lost or the key's first request is still in progress (its replica died)."""

    def __init__(self, url: str, api_key: str) -> None:
        self.http = httpx.Client(base_url=url, headers={"x-api-key": api_key}, timeout=30)
        self.repeats = 0

    def close(self) -> None:
        self.http.close()

    def get(self, path: str, **params: Any) -> Any:
        response = self.http.get(path, params=params)
        assert response.status_code == 200, response.text
        return response.json()

    def post(self, path: str, body: dict[str, Any], timeout: float = 60) -> Any:
        key = uuid.uuid4().hex
        deadline = time.monotonic() + timeout
        while True:
            try:
                response = self.http.post(path, json=body, headers={"idempotency-key": key})
            except httpx.TransportError as error:
                problem = repr(error)
            else:
                if response.status_code < 300:
                    return response.json()
                in_progress = response.status_code == 409 and "in progress" in response.text
                if response.status_code not in (502, 503, 504) and not in_progress:
                    raise AssertionError(f"POST {path}: {response.status_code} {response.text}")
                problem = f"{response.status_code} {response.text[:200]}"
            assert time.monotonic() < deadline, f"POST {path} never answered: {problem}"
            self.repeats += 1
            time.sleep(0.2)  # a backoff between attempts, not a synchronisation

    def events(self, session_id: str) -> list[dict[str, Any]]:
        return list(self.get(f"/v1/sessions/{session_id}/events", limit=100)["data"])

    def say(self, session_id: str, words: str) -> None:
        message = {"type": "user.message", "content": [{"type": "text", "text": words}]}
        self.post(f"/v1/sessions/{session_id}/events", {"events": [message]})


@dataclass(frozen=True)
class Frame:
    seq: int
    event_id: str
    type: str


class StreamReader(threading.Thread):
    """Reads a session's SSE stream through the balancer from its first event until it saw `idles`
    `session.status_idle` events; a dropped stream is opened again with Last-Event-ID = the next seq."""

    def __init__(self, url: str, api_key: str, session_id: str, idles: int) -> None:
        super().__init__(name=f"stream-{session_id}", daemon=True)
        self.url = f"{url}/v1/sessions/{session_id}/events/stream"
        self.api_key, self.idles = api_key, idles
        self.frames: list[Frame] = []
        self.upstreams: list[str] = []  # the registry replica of each connection
        self.drops: list[str] = []
        self.failure: BaseException | None = None

    def idle_count(self) -> int:
        return sum(frame.type == "session.status_idle" for frame in self.frames)

    def run(self) -> None:
        try:
            with httpx.Client(timeout=httpx.Timeout(60, connect=5)) as client:
                while self.idle_count() < self.idles:
                    self.read_once(client)
        except BaseException as error:  # reported by the test
            self.failure = error

    def read_once(self, client: httpx.Client) -> None:
        cursor = self.frames[-1].seq + 1 if self.frames else 1
        headers = {"x-api-key": self.api_key, "Last-Event-ID": str(cursor)}
        try:
            with client.stream("GET", self.url, headers=headers) as response:
                if response.status_code != 200:
                    self.drops.append(f"status {response.status_code}")
                    return
                self.upstreams.append(response.headers.get("x-upstream", "?"))
                buffer = ""
                for chunk in response.iter_text():
                    buffer += chunk
                    *blocks, buffer = buffer.split("\n\n")
                    for block in blocks:
                        self.take(block)
                    if self.idle_count() >= self.idles:
                        return
        except httpx.TransportError as error:
            self.drops.append(repr(error))
            return
        self.drops.append("stream ended")

    def take(self, block: str) -> None:
        fields = dict(line.split(": ", 1) for line in block.splitlines() if line and not line.startswith(":"))
        if "id" in fields:
            data = orjson.loads(fields["data"])
            self.frames.append(Frame(seq=int(fields["id"]), event_id=data["id"], type=fields["event"]))


class Traffic(threading.Thread):
    """Model calls through the balancer's gateway port, one after another, until stopped; every outcome kept."""

    def __init__(self, url: str) -> None:
        super().__init__(name="gateway-traffic", daemon=True)
        self.url = f"{url}/v1/messages"
        self.outcomes: list[int | str] = []
        self.halt = threading.Event()

    def run(self) -> None:
        body = {"model": MODEL, "max_tokens": 16, "messages": [{"role": "user", "content": "traffic"}]}
        with httpx.Client(timeout=30) as client:
            while not self.halt.is_set():
                try:
                    self.outcomes.append(client.post(self.url, json=body).status_code)
                except httpx.TransportError as error:
                    self.outcomes.append(repr(error))
