"""How a fixture or a test holds a server for its scope: `yield from served(server)` (a fixture's body) or
`with serving(server)` yields the server, already started, and stops it at the end, whatever happened."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Protocol, TypeVar


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
