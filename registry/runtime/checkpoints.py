"""Where a turn looks up from its work: between stream chunks, steps and tool calls it stops for a
worker shutdown, a lost lease, an archived session or a `user.interrupt`; blocking calls (MCP, the
grader, a tool in the sandbox) run in a thread and are abandoned at such a stop."""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from django.db import connection

from registry.runtime.lease import Lease
from registry.runtime.writer import TurnLog
from registry.sessions import selectors, thread_log
from registry.sessions.log import SessionTerminated
from registry.sessions.models import SessionEvent

Result = TypeVar("Result")
UNAPPLIED_INTERRUPT = "user.interrupt is not applied on code_harness: the turn in flight runs to completion."
# How often a blocking call looks at its session while it waits.
WAIT_SLICE_SECONDS = 0.05


class TurnInterrupted(Exception):
    """A `user.interrupt` arrived during a turn of a harness that honors it."""

    def __init__(self, interrupts: list[SessionEvent]) -> None:
        super().__init__("interrupted")
        self.interrupts = interrupts


class WorkerStopping(Exception):
    """The worker was asked to stop: leave the turn to the next worker without writing."""


class TurnEnded(Exception):
    """The turn ends early with this stop reason (a limit, the budget), its error already reported."""

    def __init__(self, stop_reason: dict[str, Any], details: dict[str, Any] | None = None) -> None:
        super().__init__(stop_reason["type"])
        self.stop_reason = stop_reason
        self.details = details  # the idle event's `stop_details` (a refusal's)


@dataclass(kw_only=True)
class Checkpoints:
    """The stops of one held session's turns."""

    lease: Lease
    turn: TurnLog
    stopping: threading.Event
    check_seconds: float
    honors_interrupts: bool
    # Set by the worker when a notification names this session (an interrupt, an archive...).
    attention: threading.Event
    # Halts the child threads a `user.interrupt` names (the session's `ThreadGroup.interrupt`).
    interrupt_threads: Callable[[list[str]], None] = lambda thread_ids: None
    _last_check: float = field(default_factory=time.monotonic)

    def check(self, force: bool = False) -> None:
        """Stop for shutdown, a lost lease, or an interrupt; the database is asked at most every
        `check_seconds` unless a notification drew attention."""
        if self.stopping.is_set():
            raise WorkerStopping("the worker is stopping; another worker takes the turn over")
        self.lease.check()
        self.stop_if_halted()
        now = time.monotonic()
        if not (force or self.attention.is_set()) and now - self._last_check < self.check_seconds:
            return
        self.attention.clear()
        self._last_check = now
        self.look()

    def stop_if_halted(self) -> None:
        """Nothing halts a session's turn from within this worker (a child thread's turn is halted by it)."""

    def look(self) -> None:
        """What the database says: the session ended, or an interrupt came (`code_harness` answers it)."""
        if not selectors.session_is_live(self.lease.session_id):
            raise SessionTerminated(f"session {self.lease.session_id} was archived, terminated or deleted")
        interrupts = selectors.pending_events(self.lease.session_id, types=("user.interrupt",))
        aimed = [interrupt for interrupt in interrupts if thread_log.child_named(interrupt)]
        if aimed:  # an interrupt naming a child thread halts that thread only
            self.turn.acknowledge(aimed)
            self.interrupt_threads([str(thread_log.child_named(interrupt)) for interrupt in aimed])
            interrupts = [interrupt for interrupt in interrupts if interrupt not in aimed]
        if interrupts and self.honors_interrupts:
            raise TurnInterrupted(interrupts)
        if interrupts:
            self.turn.acknowledge(interrupts)
            self.reject(interrupts)

    def reject(self, interrupts: list[SessionEvent]) -> None:
        """`code_harness` accepts (acknowledges) the interrupt, then answers it with `session.error`."""
        for interrupt in interrupts:
            kind = "unapplied_event" if selectors.sent_natively(interrupt) else "unknown_error"
            self.turn.error(kind, UNAPPLIED_INTERRUPT, retry="exhausted")

    def sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while (remaining := deadline - time.monotonic()) > 0:
            self.attention.wait(min(remaining, self.check_seconds))
            self.check()

    def wait_for(self, call: Callable[[], Result]) -> Result:
        """Run a blocking call in a thread; an interrupt, archive or shutdown abandons it.

        The session's database connection is given back first, so a long wait holds none.
        """
        connection.close()
        box: dict[str, Any] = {}
        done = threading.Event()

        def target() -> None:
            try:
                box["value"] = call()
            except BaseException as error:
                box["error"] = error
            finally:
                done.set()

        # The thread runs in a copy of this one's context: spans (and log ids) started there nest under ours.
        current = contextvars.copy_context()
        name = f"call-{self.lease.session_id}"
        threading.Thread(target=current.run, args=(target,), name=name, daemon=True).start()
        while not done.wait(WAIT_SLICE_SECONDS):
            self.check()
        if "error" in box:
            raise box["error"]
        return box["value"]  # type: ignore[no-any-return]
