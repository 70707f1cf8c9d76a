"""Live servers and processes for end-to-end tests: the registry under daphne, `rungateway`, a private
Redis that a test may stop and start, on free loopback ports."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
from django.db import connection

from fakes.waiting import wait_until
from tests.support.serving import serving

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def rungateway(config: Path, *extra: str) -> subprocess.Popen[str]:
    """`manage.py rungateway --config <config>` with its output piped (text)."""
    return subprocess.Popen(
        [sys.executable, "manage.py", "rungateway", "--config", str(config), *extra],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_database_url() -> str:
    """The URL of the database this test process uses (pytest-django's test database)."""
    settings = connection.settings_dict
    return f"postgres://{settings['USER'] or 'postgres'}@{settings['HOST']}:{settings['PORT']}/{settings['NAME']}"


def wait_until_up(url: str, process: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    def up() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"server exited early with {process.returncode}")
        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(url, timeout=1).status_code == 200
        return False

    wait_until(up, timeout=timeout, what=f"{url} to come up")


@contextlib.contextmanager
def live_registry(**environment: str) -> Iterator[str]:
    """Run `daphne settings.asgi:application` against the test database; yields its root URL."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "settings.base", "DATABASE_URL": test_database_url(), **environment}
    with live_registry_process(env) as url:
        yield url


def listening_socket() -> socket.socket:
    """A loopback socket bound to a port the kernel chose and already listening: handed to a child process
    (`daphne_command`), it cannot be taken by anyone else between the choice and the child's start."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    listener.set_inheritable(True)
    return listener


def daphne_command(listener: socket.socket) -> list[str]:
    """daphne serving the registry on the socket `listener` (pass its fd to the child: `pass_fds`)."""
    return [sys.executable, "-m", "daphne", "--fd", str(listener.fileno()), "settings.asgi:application"]


@contextlib.contextmanager
def live_registry_process(env: dict[str, str]) -> Iterator[str]:
    """Run `daphne settings.asgi:application` with exactly this environment; yields its root URL."""
    with listening_socket() as listener, tempfile.TemporaryFile() as log:
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        process = subprocess.Popen(
            daphne_command(listener),
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            pass_fds=(listener.fileno(),),
        )
        try:
            wait_until_up(f"{url}/healthz", process)
            yield url
        finally:
            stop(process)


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def accepts(port: int) -> bool:
    """Whether something accepts TCP connections on the loopback `port`."""
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
        return True
    return False


class RedisServer:
    """A private redis-server on a fixed free port (stopping it disturbs nothing else), which a test may stop and
    start again on the same port."""

    def __init__(self) -> None:
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The server's URL."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        """Start it and wait until it accepts connections."""
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed")
        self.process = subprocess.Popen(
            [binary, "--bind", "127.0.0.1", "--port", str(self.port), "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_until(lambda: accepts(self.port), timeout=10, what="redis-server to accept connections")
        return self

    def stop(self) -> None:
        """Kill it (at once: an outage, not a shutdown)."""
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None


def private_redis() -> contextlib.AbstractContextManager[RedisServer]:
    """A started `RedisServer`, killed at the end of the block."""
    return serving(RedisServer().start())
