"""A deadline that is cheap to move.

A keep-alive connection sets and clears a deadline several times per request (the head's, the idle one,
an upstream's read and idle timeouts). Scheduling and cancelling a loop timer each time cost about 5 us on
uvloop; `LazyTimer` keeps one loop timer and moves it only when a deadline comes before it. When it fires
before the current deadline it waits again; a cleared deadline lets it lapse.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class LazyTimer:
    """Calls `callback` once the latest deadline `set` passes, unless `clear` came first."""

    __slots__ = ("_callback", "_deadline", "_handle", "_loop")

    def __init__(self, loop: asyncio.AbstractEventLoop, callback: Callable[[], object]) -> None:
        self._loop = loop
        self._callback = callback
        self._deadline: float | None = None
        self._handle: asyncio.TimerHandle | None = None

    def set(self, seconds: float) -> None:
        """Fire `seconds` from now (replacing any deadline set before)."""
        self._deadline = deadline = self._loop.time() + seconds
        if self._handle is None or self._handle.when() > deadline:
            if self._handle is not None:
                self._handle.cancel()
            self._handle = self._loop.call_at(deadline, self._fire)

    def clear(self) -> None:
        """Do not fire (the loop timer lapses on its own)."""
        self._deadline = None

    def drop(self) -> None:
        """Do not fire, and release the loop timer now (its owner is going away)."""
        self._deadline = None
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _fire(self) -> None:
        self._handle = None
        deadline = self._deadline
        if deadline is None:
            return
        if deadline > self._loop.time():
            self._handle = self._loop.call_at(deadline, self._fire)
            return
        self._deadline = None
        self._callback()
