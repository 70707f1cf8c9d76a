"""How a fixture or a test holds a server for its scope: `yield from served(server)` (a fixture's body) or
`with serving(server)` yields the server, already started, and stops it at the end, whatever happened."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from typing import Protocol, TypeVar

import pytest


class Stoppable(Protocol):
    def stop(self) -> object: ...


S = TypeVar("S", bound=Stoppable)


def served(server: S) -> Iterator[S]:
    """Yield `server` (already serving), then stop it."""
    try:
        yield server
    finally:
        server.stop()


serving = contextlib.contextmanager(served)


@pytest.fixture
def refusing_url() -> Iterator[str]:
    """A loopback URL whose port is bound but not listening, so every connection is refused."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as bound:
        bound.bind(("127.0.0.1", 0))
        host, port = bound.getsockname()
        yield f"http://{host}:{port}/userinfo"
