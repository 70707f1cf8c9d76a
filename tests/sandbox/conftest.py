"""Fixtures of the sandbox tests: a backend whose root any session uid can traverse (not pytest's tmp),
and HTTP servers on the host's loopback for the network tests."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from registry.sandbox.backend import BwrapBackend, BwrapSandbox, Limits, SandboxSpec


@pytest.fixture
def limits() -> Limits:
    return Limits(memory_mb=512, pids=64, workspace_mb=64, output_limit=2000, command_timeout_ms=10_000)


@pytest.fixture
def backend(limits: Limits) -> Iterator[BwrapBackend]:
    root = Path(tempfile.mkdtemp(prefix="sandboxes-", dir="/tmp"))
    os.chmod(root, 0o711)
    made = BwrapBackend(root, limits)
    yield made
    for session_id in list(made.sandboxes):
        made.destroy(session_id)
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def sandbox_for(backend: BwrapBackend) -> Callable[[str], BwrapSandbox]:
    def make(session_id: str) -> BwrapSandbox:
        return backend.ensure(SandboxSpec(session_id=session_id, workspace_id="wsp_test"))

    return make


Route = Callable[[str], tuple[bytes, str]]  # request path -> (body, content type)


@pytest.fixture
def loopback_site() -> Iterator[Callable[[Route], str]]:
    """Starts HTTP servers on 127.0.0.1 answering GETs with `route(path)`; yields a starter of root URLs."""
    servers: list[ThreadingHTTPServer] = []

    def start(route: Route) -> str:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body, content_type = route(self.path)
                self.send_response(200)
                self.send_header("content-type", content_type)
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                """Quiet."""

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()
