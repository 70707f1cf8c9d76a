"""Deadlines that cost no loop timer each.

A keep-alive connection sets and clears a deadline several times per request (the head's, the idle one,
an upstream's read and idle timeouts). Scheduling and cancelling a loop timer each time cost about 5 us on
uvloop; `LazyTimer` keeps one loop timer and moves it only when a deadline comes before it. When it fires
before the current deadline it waits again; a cleared deadline lets it lapse. `Deadlines` does the same for
the requests of a whole loop: one loop timer for every running request's deadline.
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


CLOCK_SLACK_SECONDS = 0.001


class Deadline:
    """One request's deadline (see `Deadlines`)."""

    __slots__ = ("cancelling", "expired", "seconds", "task", "when")

    def __init__(self, task: asyncio.Task[object], seconds: float) -> None:
        self.task = task
        self.seconds = seconds
        self.when = task.get_loop().time() + seconds
        self.cancelling = task.cancelling()  # cancellations already asked of the task (not ours)
        self.expired = False


class Deadlines:
    """Request deadlines for one event loop at the cost of a dict entry each, cancelling like `asyncio.timeout`.

    `asyncio.timeout` schedules and cancels a loop timer per request (7.4 us, against 1.6 us here, on the
    gateway's fast path). Requests under one timeout pass their deadlines in the order they started, so each
    timeout keeps its running requests in an insertion-ordered dict whose first entry is due first; one loop
    timer wakes at the earliest first entry, cancels the tasks whose deadline passed and waits for the next.
    A request that ends removes its entry; the timer is not moved for that (it finds nothing due and waits
    again), so under steady traffic it fires about once per timeout.
    """

    def __init__(self) -> None:
        self._running: dict[float, dict[Deadline, None]] = {}
        self._handle: asyncio.TimerHandle | None = None

    def enter(self, seconds: float) -> Deadline:
        """Start the current task's deadline, `seconds` from now."""
        task = asyncio.current_task()
        assert task is not None
        deadline = Deadline(task, seconds)
        running = self._running.get(seconds)
        if running is None:
            running = self._running[seconds] = {}
        running[deadline] = None
        if self._handle is None or self._handle.when() > deadline.when:
            self._arm(task.get_loop(), deadline.when)
        return deadline

    def leave(self, deadline: Deadline) -> bool:
        """End a deadline; True when it cancelled the task (that cancellation is then consumed, as
        `asyncio.timeout` does, so the caller answers the timeout instead of propagating it)."""
        entries = self._running.get(deadline.seconds)
        if entries is not None:
            entries.pop(deadline, None)
        return deadline.expired and deadline.task.uncancel() <= deadline.cancelling

    def _arm(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle = loop.call_at(when, self._expire, loop)

    def _expire(self, loop: asyncio.AbstractEventLoop) -> None:
        self._handle = None
        now = loop.time() + CLOCK_SLACK_SECONDS  # a loop may run a timer up to its clock's resolution early
        earliest: float | None = None
        for seconds, entries in list(self._running.items()):
            while entries:
                head = next(iter(entries))
                if head.when > now:
                    earliest = head.when if earliest is None else min(earliest, head.when)
                    break
                del entries[head]
                head.expired = True
                head.task.cancel()
            if not entries:
                del self._running[seconds]
        if earliest is not None:
            self._arm(loop, earliest)
