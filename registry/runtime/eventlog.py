"""The visible logs a worker has read: a visible event never changes and `seq` is gap-free in commit
order, so a session's log is read once, then only from its last `seq` on."""

from __future__ import annotations

import threading
from collections import OrderedDict

from registry.sessions import selectors
from registry.sessions.models import SessionEvent


class VisibleLogs:
    """The visible events of the `sessions` sessions this worker ran most recently, in `seq` order."""

    def __init__(self, *, sessions: int) -> None:
        self.sessions = max(sessions, 1)
        self._logs: OrderedDict[str, list[SessionEvent]] = OrderedDict()
        self._lock = threading.Lock()

    def read(self, session_id: str) -> list[SessionEvent]:
        """The session's visible log as the database has it now (a new list; the events are shared)."""
        with self._lock:
            known = self._logs.pop(session_id, [])
        after = (known[-1].seq or 0) if known else 0
        log = known + selectors.visible_events_after(session_id, after)
        with self._lock:
            self._logs[session_id] = log
            while len(self._logs) > self.sessions:
                self._logs.popitem(last=False)
        return list(log)
